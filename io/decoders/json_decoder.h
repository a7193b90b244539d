#pragma once

#include <string>
#include <vector>

#include "ferry/io/decoders/decoder.h"

namespace ferry {

/// "json": a JSON number, or a (nested) array of numbers, as WebDataset's ".json" members hold them
/// when they are parsed rather than kept as bytes ("raw"); or the one of them that a JSON pointer
/// (RFC 6901) selects in a document of objects, so that one `.json` feeds several fields
/// (`{"boxes": [[...]], "labels": [...]}` as `select: /boxes` and `select: /labels`).
///
/// In: the member's bytes (a 1-D uint8 tensor), UTF-8 JSON text per RFC 8259. With a pointer the whole
/// document is checked (objects, strings with their escapes and UTF-8, null; duplicate names: the last
/// one counts, as Python's json module takes it) and the selected value is read; without one the
/// document itself is the value. The value holds numbers, `true`/`false` (1/0) and arrays only.
/// Out: a C-contiguous tensor of spec.dtype (uint8, int8, int16,
/// int32, int64, bool, float16, bfloat16, float32 or float64) whose shape is the nesting of the arrays:
/// a number is a 0-d tensor (field shape []), [[1, 2, 3], [4, 5, 6]] is [2, 3]. The arrays must be
/// rectangular, and the shape must match the field's: the same rank, every fixed dimension equal, a
/// variable first dimension of any length up to max_length. An empty array stands for a zero-length
/// dimension whatever the field's dimensions after it (`[]` for a field [*, 4] is a [0, 4] tensor).
///
/// Values: an integer field takes integers only (no fraction or exponent; `true`/`false`), read
/// exactly into int64 (9007199254740993 stays itself) and refused, naming the value, when they do
/// not fit the dtype. A float32 or float64 field takes the nearest value to the decimal text; float16
/// and bfloat16 take the nearest double's nearest value, as NumPy's np.float16(float(text)) does.
/// A finite number too large for the dtype is an error; one too small becomes (signed) zero.
///
/// Every malformed input is a ferry::Error naming what was expected, what was found and the byte
/// offset within the member: strings, objects and null; NaN and Infinity; leading zeros, a bare '-',
/// '.' or exponent; trailing commas and text after the value; ragged arrays; arrays nested more than
/// 32 deep; empty input. The parser never reads outside the member, recurses at most 32 deep and
/// holds no more values than the member has bytes, so no input can exhaust the stack or memory.
///
/// Threads: decode() is called concurrently by the decode threads; it is thread-safe (the decoder
/// keeps no state and owns nothing). The output owns its data.
class JsonDecoder : public Decoder {
 public:
  /// Deepest nesting of arrays and objects accepted (the parser's recursion bound).
  static constexpr int kMaxDepth = 32;

  /// `pointer`: the value to read, as RFC 6901 writes it ("/boxes", "/annotations/0/bbox"); "" for
  /// the whole document. Throws ferry::Error for a pointer that does not start with '/' or holds a '~'
  /// other than ~0 and ~1.
  explicit JsonDecoder(std::string pointer = "");

  std::string_view name() const override { return "json"; }
  const std::string& pointer() const noexcept { return pointer_; }
  /// Thread-safe; allocates the values and the output; does not block. Throws ferry::Error as the
  /// class says; the decode stage adds the sample and the field.
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override;

 private:
  at::Tensor decode_value(const char* data, int64_t size, const FieldSpec& spec) const;

  std::string pointer_;
  std::vector<std::string> tokens_;  // the pointer's reference tokens, unescaped
};

}  // namespace ferry
