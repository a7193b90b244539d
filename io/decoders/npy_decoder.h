#pragma once

#include <string>

#include "ferry/io/decoders/decoder.h"

namespace ferry {

/// Whether NpyDecoder may change an array's dtype to the field's.
struct NpyDecodeOptions {
  /// kLossless: only conversions that keep every value of the stored dtype (uint8 -> int32,
  /// int16 -> float32, float16 -> float32, ...); anything else is an Error. kAny: whatever
  /// Tensor::to() does (float64 -> float32 rounds, float -> int truncates, wide ints wrap).
  enum class Cast { kLossless, kAny } cast = Cast::kLossless;
};

/// "npy": one NumPy .npy file's bytes (a 1-D uint8 tensor) in, a C-contiguous tensor of the field's
/// dtype and shape out.
///
/// Reads format versions 1.0, 2.0 and 3.0; little-endian (or single-byte) dtypes b1 u1 i1 i2 u2 i4
/// u4 i8 f2 f4 f8; C or Fortran order (a Fortran-order array is transposed into C order, so the
/// values come out at the same indices as in NumPy). The array's shape must match the field's: the
/// same rank, every fixed dimension equal, and a variable first dimension of any length up to
/// max_length. A dtype other than the field's is converted by the options' rule (lossless only, by
/// default). Big-endian, structured, object (pickled), string and complex arrays are refused.
///
/// Every malformed input — bad magic, unknown version, a header length past the end, a header dict
/// that does not parse, data shorter (or longer) than shape x itemsize — is a ferry::Error that
/// names what is wrong and the byte offset in the file where it is. Nothing is read out of bounds.
///
/// Threads: decode() is called concurrently by the decode threads; it is thread-safe (it keeps no
/// state). The decoder owns only its options. The output owns a copy of the data: it does not keep
/// the encoded bytes alive, and its elements are aligned whatever the header's length.
///
/// The built-in "npy" in DecoderRegistry has default options; register a NpyDecoder with
/// Cast::kAny under another name (e.g. "npy_cast") for datasets saved as float64 but read as float32.
class NpyDecoder : public Decoder {
 public:
  /// Throws ferry::Error for an empty name.
  explicit NpyDecoder(NpyDecodeOptions options = {}, std::string name = "npy");

  std::string_view name() const override { return name_; }
  const NpyDecodeOptions& options() const noexcept { return options_; }

  /// Thread-safe; allocates the output; does not block. Throws ferry::Error as the class says.
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override;

 private:
  NpyDecodeOptions options_;
  std::string name_;
};

}  // namespace ferry
