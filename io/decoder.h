#pragma once

#include <string_view>

#include <ATen/core/Tensor.h>

#include "io/source.h"

namespace ferry {

/// Turns one encoded field of one sample into a tensor of spec.dtype whose shape matches spec.shape
/// (any length in dim 0 for a variable-length field). Called concurrently from the decode threads:
/// decode() must be thread-safe. Throws (ferry::Error preferred) for input it cannot decode; the
/// pipeline adds the sample's identity and the field is named by the decode stage.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::string_view name() const = 0;
  virtual at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const = 0;
};

}  // namespace ferry
