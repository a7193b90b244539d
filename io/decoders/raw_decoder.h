#pragma once

#include <optional>

#include "ferry/io/decoders/decoder.h"

namespace ferry {

/// "raw": the encoded field is the tensor's bytes in native byte order — a 1-D uint8 tensor that is
/// reinterpreted, without copying, as spec.dtype with spec.shape (dim 0 of a variable-length field
/// is whatever the byte count gives). An encoded tensor that already has spec.dtype is checked
/// against spec.shape and passed on.
///
/// By default the rows (dim 0) must be as many as the shape says (at most max_length for a
/// variable-length field). With `truncate`, rows past them are cut (a view, no copy); with
/// `pad_value`, a fixed-length field of fewer rows is filled up with it (a copy).
class RawDecoder : public Decoder {
 public:
  struct Options {
    bool truncate = false;
    std::optional<double> pad_value;
  };

  RawDecoder() = default;
  explicit RawDecoder(Options options) : options_(options) {}

  std::string_view name() const override { return "raw"; }
  /// Throws ferry::Error when the byte count is not a whole number of elements of the spec's shape,
  /// or the rows do not fit it and the options do not say what to do.
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override;

 private:
  Options options_;
};

}  // namespace ferry
