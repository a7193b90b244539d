#pragma once

#include "ferry/io/decoders/decoder.h"

namespace ferry {

/// "raw": the encoded field is the tensor's bytes in native byte order — a 1-D uint8 tensor that is
/// reinterpreted, without copying, as spec.dtype with spec.shape (dim 0 of a variable-length field
/// is whatever the byte count gives). An encoded tensor that already has spec.dtype is checked
/// against spec.shape and passed on.
class RawDecoder : public Decoder {
 public:
  std::string_view name() const override { return "raw"; }
  /// Throws ferry::Error when the byte count is not a whole number of elements of the spec's shape.
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override;
};

}  // namespace ferry
