#include "ferry/io/decoders/npy_decoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/io/decoders/npy_format.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/io/util/printable.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

// The data is copied byte for byte into tensors of the same dtype: that is only right where the
// file's byte order (little-endian, by the format's convention for what ferry accepts) is native.
static_assert(std::endian::native == std::endian::little, "NpyDecoder assumes a little-endian machine");

using detail::npy::kMagic;

[[noreturn]] void fail(const std::string& what, int64_t offset) {
  throw Error("npy: " + what + " at byte " + std::to_string(offset));
}

// A string from the header, as messages show it: the file's bytes may be anything, and a message must
// stay printable ASCII (a byte that is not UTF-8 would otherwise break Python's str of the error).
std::string shown(const std::string& text) { return printable(text, 64); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + (shape[i] == kVariableLength ? std::string("*") : std::to_string(shape[i]));
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

// What a value of a dtype can hold, for the lossless-conversion rule.
struct Range {
  enum class Kind { kBool, kUnsigned, kSigned, kFloat } kind;
  int bits = 0;     // integers: value bits including the sign
  int digits = 0;   // floats: significand bits
  int max_exp = 0;  // floats: largest exponent
};

std::optional<Range> range_of(at::ScalarType dtype) {
  using K = Range::Kind;
  switch (dtype) {
    case at::kBool: return Range{K::kBool, 1};
    case at::kByte: return Range{K::kUnsigned, 8};
    case at::kChar: return Range{K::kSigned, 8};
    case at::kShort: return Range{K::kSigned, 16};
    case at::kInt: return Range{K::kSigned, 32};
    case at::kLong: return Range{K::kSigned, 64};
    case at::kHalf: return Range{K::kFloat, 16, 11, 15};
    case at::kBFloat16: return Range{K::kFloat, 16, 8, 127};
    case at::kFloat: return Range{K::kFloat, 32, 24, 127};
    case at::kDouble: return Range{K::kFloat, 64, 53, 1023};
    default: return std::nullopt;
  }
}

// True where every value of `from` is a value of `to`.
bool lossless(const Range& from, const Range& to) {
  using K = Range::Kind;
  switch (from.kind) {
    case K::kBool: return true;
    case K::kUnsigned:
      return (to.kind == K::kUnsigned && to.bits >= from.bits) || (to.kind == K::kSigned && to.bits > from.bits) ||
             (to.kind == K::kFloat && to.digits >= from.bits);
    case K::kSigned:
      // A signed b-bit integer has b - 1 magnitude bits; its most negative value is a power of two.
      return (to.kind == K::kSigned && to.bits >= from.bits) || (to.kind == K::kFloat && to.digits >= from.bits - 1);
    case K::kFloat: return to.kind == K::kFloat && to.digits >= from.digits && to.max_exp >= from.max_exp;
  }
  return false;
}

// A .npy element type ferry reads: how its bytes are stored, and what it means. Unsigned 16- and
// 32-bit arrays are read as the signed type of the same width and widened (libtorch has no uint16
// and uint32 everywhere ferry builds).
struct NpyType {
  std::string_view code;   // "f4"
  at::ScalarType storage;  // the bytes, as a tensor dtype
  int64_t itemsize;
  Range range;             // the values the file's dtype holds
  at::ScalarType widened;  // the dtype the values are read into (== storage unless unsigned)
};

const std::array<NpyType, 11>& npy_types() {
  using K = Range::Kind;
  static const std::array<NpyType, 11> types{{
      {"b1", at::kBool, 1, {K::kBool, 1}, at::kBool},
      {"u1", at::kByte, 1, {K::kUnsigned, 8}, at::kByte},
      {"i1", at::kChar, 1, {K::kSigned, 8}, at::kChar},
      {"i2", at::kShort, 2, {K::kSigned, 16}, at::kShort},
      {"u2", at::kShort, 2, {K::kUnsigned, 16}, at::kInt},
      {"i4", at::kInt, 4, {K::kSigned, 32}, at::kInt},
      {"u4", at::kInt, 4, {K::kUnsigned, 32}, at::kLong},
      {"i8", at::kLong, 8, {K::kSigned, 64}, at::kLong},
      {"f2", at::kHalf, 2, {K::kFloat, 16, 11, 15}, at::kHalf},
      {"f4", at::kFloat, 4, {K::kFloat, 32, 24, 127}, at::kFloat},
      {"f8", at::kDouble, 8, {K::kFloat, 64, 53, 1023}, at::kDouble},
  }};
  return types;
}

struct NpyHeader {
  std::string descr;
  int64_t descr_offset = 0;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// Parses the header: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// with exactly the keys 'descr', 'fortran_order' and 'shape'. Offsets in errors are from the start
// of the file; the parser never looks outside [begin, end).
class HeaderParser {
 public:
  HeaderParser(const char* data, int64_t begin, int64_t end) : data_(data), pos_(begin), end_(end) {}

  NpyHeader parse() {
    NpyHeader header;
    const int64_t dict_offset = skip_space();
    expect('{', "the header dict's opening '{'");
    bool seen[3] = {false, false, false};
    while (skip_space() < end_ && data_[pos_] != '}') {
      const int64_t key_offset = pos_;
      const std::string key = string_literal("a key (a quoted string)");
      skip_space();
      expect(':', "':' after key '" + shown(key) + "'");
      skip_space();
      int slot = -1;
      if (key == "descr") {
        slot = 0;
        header.descr_offset = pos_;
        if (pos_ < end_ && data_[pos_] == '[') {
          fail("structured dtypes (a list 'descr') are not supported", pos_);
        }
        header.descr = string_literal("the 'descr' string");
      } else if (key == "fortran_order") {
        slot = 1;
        header.fortran_order = boolean();
      } else if (key == "shape") {
        slot = 2;
        header.shape = tuple();
      } else {
        fail("unexpected key '" + shown(key) + "' in the header dict (expected 'descr', 'fortran_order', 'shape')",
             key_offset);
      }
      if (seen[slot]) fail("key '" + shown(key) + "' appears twice in the header dict", key_offset);
      seen[slot] = true;
      skip_space();
      if (pos_ < end_ && data_[pos_] == ',') {
        ++pos_;
      } else if (pos_ >= end_ || data_[pos_] != '}') {
        fail("expected ',' or '}' in the header dict", pos_);
      }
    }
    expect('}', "the header dict's closing '}'");
    // NumPy pads the header with spaces and ends it with '\n'; nothing else may follow the dict.
    if (skip_space() < end_) fail("unexpected text after the header dict", pos_);
    static constexpr const char* kKeys[3] = {"descr", "fortran_order", "shape"};
    for (int k = 0; k < 3; ++k) {
      if (!seen[k]) fail("the header dict has no '" + std::string(kKeys[k]) + "'", dict_offset);
    }
    return header;
  }

 private:
  int64_t skip_space() {
    while (pos_ < end_ && (data_[pos_] == ' ' || data_[pos_] == '\n' || data_[pos_] == '\t' || data_[pos_] == '\r')) {
      ++pos_;
    }
    return pos_;
  }

  void expect(char c, const std::string& what) {
    if (pos_ >= end_) fail("the header ends before " + what, pos_);
    if (data_[pos_] != c) fail("expected " + what + ", found " + byte_text(data_[pos_]), pos_);
    ++pos_;
  }

  static std::string byte_text(char c) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7F) return std::string("'") + c + "'";
    static constexpr char kHex[] = "0123456789abcdef";
    return std::string("byte 0x") + kHex[byte >> 4] + kHex[byte & 15];
  }

  std::string string_literal(const std::string& what) {
    if (pos_ >= end_) fail("the header ends before " + what, pos_);
    const char quote = data_[pos_];
    if (quote != '\'' && quote != '"') fail("expected " + what + ", found " + byte_text(quote), pos_);
    const int64_t start = ++pos_;
    while (pos_ < end_ && data_[pos_] != quote) {
      if (data_[pos_] == '\\') fail("escapes in header strings are not supported", pos_);
      ++pos_;
    }
    if (pos_ >= end_) fail("unterminated string in the header", start - 1);
    std::string value(data_ + start, static_cast<size_t>(pos_ - start));
    ++pos_;
    return value;
  }

  bool boolean() {
    for (const std::string_view word : {std::string_view("True"), std::string_view("False")}) {
      const auto length = static_cast<int64_t>(word.size());
      if (end_ - pos_ >= length && std::string_view(data_ + pos_, word.size()) == word) {
        pos_ += length;
        return word == "True";
      }
    }
    fail("expected True or False for 'fortran_order'", pos_);
  }

  std::vector<int64_t> tuple() {
    expect('(', "the 'shape' tuple's '('");
    std::vector<int64_t> dims;
    while (skip_space() < end_ && data_[pos_] != ')') {
      dims.push_back(integer());
      skip_space();
      if (pos_ < end_ && data_[pos_] == ',') {
        ++pos_;
      } else if (pos_ >= end_ || data_[pos_] != ')') {
        fail("expected ',' or ')' in the 'shape' tuple", pos_);
      }
    }
    expect(')', "the 'shape' tuple's ')'");
    return dims;
  }

  int64_t integer() {
    const int64_t start = pos_;
    int64_t value = 0;
    while (pos_ < end_ && data_[pos_] >= '0' && data_[pos_] <= '9') {
      if (value > (INT64_MAX - 9) / 10) fail("a dimension in 'shape' is too large", start);
      value = value * 10 + (data_[pos_] - '0');
      ++pos_;
    }
    if (pos_ == start) {
      fail("expected a non-negative integer in 'shape', found " +
               (pos_ < end_ ? byte_text(data_[pos_]) : std::string("the end of the header")),
           pos_);
    }
    if (pos_ < end_ && data_[pos_] == 'L') ++pos_;  // Python 2 longs: files written by old NumPy
    return value;
  }

  const char* data_;
  int64_t pos_;
  int64_t end_;
};

uint64_t read_le(const uint8_t* p, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(p[i]) << (8 * i);
  return value;
}

// The element type named by a 'descr' such as "<f4", or an Error saying why ferry does not read it.
const NpyType& npy_type(const std::string& descr, int64_t offset) {
  // The string starts after the opening quote.
  const int64_t at = offset + 1;
  if (descr.size() < 2) fail("unrecognised dtype '" + shown(descr) + "'", at);
  const char order = descr[0];
  const std::string_view code = std::string_view(descr).substr(1);
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    fail("dtype '" + shown(descr) + "' has no byte-order character (one of < > | =)", at);
  }
  if (code == "O") fail("object arrays ('" + shown(descr) + "') hold pickled Python objects, which ferry does not read", at);
  const NpyType* found = nullptr;
  for (const NpyType& type : npy_types()) {
    if (type.code == code) found = &type;
  }
  if (!found) {
    fail("unsupported dtype '" + shown(descr) + "' (ferry reads b1 u1 i1 i2 u2 i4 u4 i8 f2 f4 f8, little-endian)", at);
  }
  if (found->itemsize > 1 && order == '>') {
    fail("big-endian dtype '" + shown(descr) + "' is not supported; save the array with arr.astype('<" + std::string(code) +
             "')",
         at);
  }
  if (found->itemsize > 1 && order == '|') fail("dtype '" + shown(descr) + "' needs a byte order, not '|'", at);
  return *found;
}

}  // namespace

NpyDecoder::NpyDecoder(NpyDecodeOptions options, std::string name) : options_(options), name_(std::move(name)) {
  if (name_.empty()) throw Error("npy decoder: the name must not be empty");
}

at::Tensor NpyDecoder::decode(const at::Tensor& encoded, const FieldSpec& spec) const {
  if (encoded.scalar_type() != at::kByte)
    throw Error("npy data must be uint8 bytes, found " + dtype_name(encoded.scalar_type()));
  const at::Tensor bytes = encoded.is_contiguous() ? encoded : encoded.contiguous();
  const int64_t size = bytes.numel();
  const uint8_t* data = bytes.data_ptr<uint8_t>();
  const auto text = [&](int64_t offset) { return reinterpret_cast<const char*>(data) + offset; };

  // The preamble: magic, version, header length.
  const auto magic_size = static_cast<int64_t>(kMagic.size());
  const int64_t magic_seen = std::min(size, magic_size);
  for (int64_t i = 0; i < magic_seen; ++i) {
    if (text(0)[i] != kMagic[static_cast<size_t>(i)]) fail("not a .npy file: bad magic (expected \\x93NUMPY)", i);
  }
  if (size < magic_size + 2) {
    fail("truncated .npy file (" + std::to_string(size) + " bytes): the preamble ends", size);
  }
  const int major = data[6], minor = data[7];
  if (major < 1 || major > 3 || minor != 0) {
    fail("unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
             " (ferry reads 1.0, 2.0 and 3.0)",
         6);
  }
  const int length_bytes = major == 1 ? 2 : 4;
  const int64_t header_begin = 8 + length_bytes;
  if (size < header_begin) {
    fail("truncated .npy file (" + std::to_string(size) + " bytes): the header length ends", size);
  }
  const auto header_length = static_cast<int64_t>(read_le(data + 8, length_bytes));
  if (header_length > size - header_begin) {
    fail("header length " + std::to_string(header_length) + " runs past the end of the " + std::to_string(size) +
             "-byte file (the header would end at byte " + std::to_string(header_begin + header_length) + ")",
         8);
  }
  const int64_t data_begin = header_begin + header_length;
  const NpyHeader header = HeaderParser(text(0), header_begin, data_begin).parse();
  const NpyType& type = npy_type(header.descr, header.descr_offset);

  // The data: exactly shape x itemsize bytes after the header.
  int64_t count = 1;
  for (const int64_t d : header.shape) {
    if (d != 0 && count > INT64_MAX / d) fail("shape " + shape_text(header.shape) + " is too large", header_begin);
    count *= d;
  }
  if (count > INT64_MAX / type.itemsize) fail("shape " + shape_text(header.shape) + " is too large", header_begin);
  const int64_t needed = count * type.itemsize;
  const int64_t available = size - data_begin;
  if (available != needed) {
    fail("the data is " + std::to_string(available) + " bytes but shape " + shape_text(header.shape) + " of '" +
             shown(header.descr) + "' needs " + std::to_string(needed) +
             (available < needed ? " (truncated file?)" : " (a .npy file holds exactly one array)"),
         data_begin);
  }

  // The array against the field: shape, then dtype.
  bool same_shape = header.shape.size() == spec.shape.size();
  for (size_t d = 0; same_shape && d < spec.shape.size(); ++d) {
    same_shape = (d == 0 && spec.variable()) || header.shape[d] == spec.shape[d];
  }
  if (!same_shape) {
    throw Error("npy array of shape " + shape_text(header.shape) + " does not match the field's " +
                shape_text(spec.shape));
  }
  if (spec.variable() && spec.max_length && header.shape[0] > *spec.max_length) {
    throw Error("npy array of shape " + shape_text(header.shape) + " is longer than the field's max_length " +
                std::to_string(*spec.max_length));
  }
  if (type.widened != spec.dtype && options_.cast == NpyDecodeOptions::Cast::kLossless) {
    const std::optional<Range> to = range_of(spec.dtype);
    if (!to || !lossless(type.range, *to)) {
      throw Error("npy array of dtype '" + shown(header.descr) + "' would lose values as the field's " +
                  dtype_name(spec.dtype) + "; save it as " + dtype_name(spec.dtype) +
                  ", or register NpyDecoder({.cast = NpyDecodeOptions::Cast::kAny}, <name>) to convert anyway");
    }
  }

  // C order is read as is; Fortran order is C order of the reversed shape, transposed back.
  std::vector<int64_t> stored_shape = header.shape;
  if (header.fortran_order) std::reverse(stored_shape.begin(), stored_shape.end());
  at::Tensor values = at::empty(stored_shape, type.storage);
  if (needed > 0) std::memcpy(values.data_ptr(), data + data_begin, static_cast<size_t>(needed));
  if (type.widened != type.storage) {
    values = values.to(type.widened).bitwise_and(type.itemsize == 2 ? int64_t{0xFFFF} : int64_t{0xFFFFFFFF});
  }
  if (values.scalar_type() != spec.dtype) values = values.to(spec.dtype);
  if (header.fortran_order && values.dim() > 1) {
    std::vector<int64_t> reverse(static_cast<size_t>(values.dim()));
    for (size_t d = 0; d < reverse.size(); ++d) reverse[d] = static_cast<int64_t>(reverse.size() - 1 - d);
    values = values.permute(reverse).contiguous();
  }
  return values;
}

}  // namespace ferry
