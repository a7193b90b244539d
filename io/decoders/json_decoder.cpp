#include "ferry/io/decoders/json_decoder.h"

#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#include "ferry/io/decoders/builtin_decoder_kinds.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

[[noreturn]] void fail(int64_t offset, const std::string& what) {
  throw Error("json: at byte " + std::to_string(offset) + ": " + what);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }  // RFC 8259's four

// A number's text for a message: it holds only [-+.0-9eE] (the grammar was checked), long ones cut.
std::string shown(std::string_view text) {
  constexpr size_t kMax = 40;
  std::string out(1, '\'');  // appended piecewise: "'" + std::string(...) trips g++ 12's -Wrestrict
  out.append(text.substr(0, kMax));
  out.append(text.size() > kMax ? "...'" : "'");
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape, bool open_ended = false) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    text += (d ? ", " : "") + (shape[d] == kVariableLength ? std::string("*") : std::to_string(shape[d]));
  }
  return text + (open_ended ? ", ...]" : "]");
}

// A number as the grammar accepted it.
struct Number {
  std::string_view text;
  int64_t offset = 0;
  bool integer = true;  // no fraction and no exponent
};

// For a number that from_chars found out of range: true when it is too small (it rounds to zero),
// false when too large. Out of range means beyond ~3e38 or below ~1e-45 for float32 (1e308 and
// 1e-324 for float64), so the sign of the decimal exponent of the first nonzero digit decides.
bool is_tiny(std::string_view text) {
  size_t i = text[0] == '-' ? 1 : 0;
  const size_t int_begin = i;
  while (i < text.size() && is_digit(text[i])) ++i;
  int64_t magnitude = 0;
  if (text[int_begin] != '0') {
    magnitude = static_cast<int64_t>(i - int_begin) - 1;  // no leading zeros: the first digit is nonzero
  } else if (i < text.size() && text[i] == '.') {
    size_t j = i + 1;
    while (j < text.size() && text[j] == '0') ++j;
    if (j == text.size() || !is_digit(text[j])) return true;  // zero itself; from_chars never says that
    magnitude = -static_cast<int64_t>(j - i);
  } else {
    return true;
  }
  while (i < text.size() && text[i] != 'e' && text[i] != 'E') ++i;
  int64_t exponent = 0;
  if (i < text.size()) {
    ++i;
    const bool negative = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    for (; i < text.size(); ++i) exponent = std::min<int64_t>(exponent * 10 + (text[i] - '0'), int64_t{1} << 40);
    if (negative) exponent = -exponent;
  }
  return magnitude + exponent < 0;
}

// Note [Rounding to float16 and bfloat16]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// float16 and bfloat16 values are the nearest to the nearest double, as NumPy's
// np.float16(float(text)) is (the nearest to the decimal text itself would need big numbers; the two
// differ only for text within 2^-53 of a halfway point). c10's Half and BFloat16 round a float, not
// a double, and double -> float -> half rounds twice: 1 + 2^-11 + 2^-30 would become the float
// 1 + 2^-11, a tie, and then 1 instead of 1 + 2^-10. Rounding the double to float "to odd" (truncate,
// then set the last bit if anything was cut) keeps the information that the value was above or below
// a tie; since float has at least two more significand bits than both targets, the second rounding
// then gives what one rounding of the double would have.
float to_float_round_to_odd(double value) {
  float nearest = static_cast<float>(value);
  if (static_cast<double>(nearest) == value || !std::isfinite(nearest)) return nearest;
  if (std::fabs(static_cast<double>(nearest)) > std::fabs(value)) nearest = std::nextafter(nearest, 0.0f);
  uint32_t bits = 0;
  std::memcpy(&bits, &nearest, sizeof bits);
  bits |= 1u;
  std::memcpy(&nearest, &bits, sizeof bits);
  return nearest;
}

template <typename T>
constexpr bool kIsFloat = std::is_same_v<T, float> || std::is_same_v<T, double>;

// The value parser for one member, storing values of type T (uint8_t for bool fields) in C order.
//
// Note [Shapes of nested arrays]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The shape is found while parsing: counts_[d] is the element count of the first array closed at
// depth d (the top-level value is at depth 0), and every later array at that depth must have the
// same count. rank_ is the depth of the first number; every number must be that deep and no array
// may be. Arrays that are all empty say less: [[], []] is [2, 0] followed by dimensions nothing
// shows, so until a number appears only a lower bound, min_rank_, is known, and such a value
// matches a field whose leading dimensions are [2, 0] whatever its rank. Rectangular counts with
// every number at depth rank_ make the number of values the product of counts_[0..rank_).
template <typename T>
class Parser {
 public:
  Parser(const char* data, int64_t size, std::string_view dtype, int64_t lo, int64_t hi)
      : data_(data), size_(size), dtype_(dtype), lo_(lo), hi_(hi) {
    counts_.fill(-1);
  }

  void parse() {
    if (size_ == 0) fail(0, "the member is empty; expected a number or an array");
    skip_space();
    parse_value(0);
    skip_space();
    if (pos_ < size_) fail(pos_, "expected nothing after the value, found " + what_is_at(pos_));
  }

  const std::vector<T>& values() const { return values_; }
  /// The shape the arrays showed; open_ended when dimensions after the last are not known.
  std::vector<int64_t> shape(bool& open_ended) const {
    open_ended = rank_ < 0;
    const int rank = open_ended ? min_rank_ : rank_;
    return std::vector<int64_t>(counts_.begin(), counts_.begin() + rank);
  }

 private:
  void skip_space() {
    while (pos_ < size_ && is_space(data_[pos_])) ++pos_;
  }

  bool starts_with(std::string_view word) const {
    return size_ - pos_ >= static_cast<int64_t>(word.size()) && std::string_view(data_ + pos_, word.size()) == word;
  }

  std::string what_is_at(int64_t at) const {
    if (at >= size_) return "the end of the input";
    const auto byte = static_cast<unsigned char>(data_[at]);
    if (byte == '"') return "a string";
    if (byte == '{') return "an object";
    if (size_ - at >= 4 && std::string_view(data_ + at, 4) == "null") return "null";
    if (byte >= 0x20 && byte < 0x7F) return std::string("'") + static_cast<char>(byte) + "'";
    static constexpr char kHex[] = "0123456789abcdef";
    return std::string("byte 0x") + kHex[byte >> 4] + kHex[byte & 15];
  }

  // One value at `depth` arrays deep; pos_ is at its first byte.
  void parse_value(int depth) {
    if (pos_ >= size_) fail(pos_, "expected a number or an array, found the end of the input");
    const char c = data_[pos_];
    if (c == '[') return array(depth);
    for (const std::string_view word :
         {std::string_view("NaN"), std::string_view("Infinity"), std::string_view("-Infinity")}) {
      if (starts_with(word)) fail(pos_, "found '" + std::string(word) + "': NaN and Infinity are not JSON numbers");
    }
    for (const bool truth : {true, false}) {
      const std::string_view word = truth ? "true" : "false";
      if (starts_with(word)) {
        leaf_at(depth, pos_);
        pos_ += static_cast<int64_t>(word.size());
        values_.push_back(from_bool(truth));
        return;
      }
    }
    if (c == '{') {
      fail(pos_,
           "expected a number or an array, found an object (for a document of objects, give the field a "
           "JSON pointer to the value to read: select: /boxes)");
    }
    if (c != '-' && !is_digit(c)) fail(pos_, "expected a number or an array, found " + what_is_at(pos_));
    leaf_at(depth, pos_);
    values_.push_back(convert(number()));
  }

  // A number or true/false is about to be read at `depth`: is that where numbers are?
  void leaf_at(int depth, int64_t offset) {
    if (rank_ < 0) {
      if (depth < min_rank_) fail(offset, "expected an array, found a number (every number must be nested as deep)");
      rank_ = depth;
    } else if (depth != rank_) {
      fail(offset, "expected an array, found a number (every number must be nested as deep)");
    }
  }

  void array(int depth) {
    const int64_t open = pos_;
    if (depth >= JsonDecoder::kMaxDepth) {
      fail(open, "arrays nested more than " + std::to_string(JsonDecoder::kMaxDepth) + " deep");
    }
    if (rank_ >= 0 && depth >= rank_) {
      fail(open, "expected a number, found an array (every number must be nested as deep)");
    }
    min_rank_ = std::max(min_rank_, depth + 1);
    ++pos_;
    skip_space();
    int64_t count = 0;
    if (pos_ < size_ && data_[pos_] == ']') {
      ++pos_;
    } else {
      for (;;) {
        parse_value(depth + 1);
        ++count;
        skip_space();
        if (pos_ < size_ && data_[pos_] == ']') {
          ++pos_;
          break;
        }
        if (pos_ >= size_ || data_[pos_] != ',') {
          fail(pos_, "expected ',' or ']' after an array element, found " + what_is_at(pos_));
        }
        ++pos_;
        skip_space();
      }
    }
    int64_t& expected = counts_[static_cast<size_t>(depth)];
    if (expected < 0) {
      expected = count;
    } else if (count != expected) {
      fail(open, "ragged arrays: this one has length " + std::to_string(count) + ", the first one as deep has length " +
                     std::to_string(expected));
    }
  }

  // RFC 8259: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?
  Number number() {
    const int64_t start = pos_;
    if (data_[pos_] == '-') ++pos_;
    if (pos_ >= size_ || !is_digit(data_[pos_])) fail(pos_, "expected a digit after '-', found " + what_is_at(pos_));
    if (data_[pos_] == '0' && pos_ + 1 < size_ && is_digit(data_[pos_ + 1])) {
      int64_t end = pos_;
      while (end < size_ && is_digit(data_[end])) ++end;
      fail(pos_, "leading zeros are not allowed, found " + shown(std::string_view(data_ + start, end - start)));
    }
    while (pos_ < size_ && is_digit(data_[pos_])) ++pos_;
    bool integer = true;
    if (pos_ < size_ && data_[pos_] == '.') {
      integer = false;
      ++pos_;
      if (pos_ >= size_ || !is_digit(data_[pos_])) fail(pos_, "expected a digit after '.', found " + what_is_at(pos_));
      while (pos_ < size_ && is_digit(data_[pos_])) ++pos_;
    }
    if (pos_ < size_ && (data_[pos_] == 'e' || data_[pos_] == 'E')) {
      integer = false;
      ++pos_;
      if (pos_ < size_ && (data_[pos_] == '-' || data_[pos_] == '+')) ++pos_;
      if (pos_ >= size_ || !is_digit(data_[pos_])) {
        fail(pos_, "expected a digit in the exponent, found " + what_is_at(pos_));
      }
      while (pos_ < size_ && is_digit(data_[pos_])) ++pos_;
    }
    return Number{std::string_view(data_ + start, static_cast<size_t>(pos_ - start)), start, integer};
  }

  [[noreturn]] void does_not_fit(const Number& n) const { fail(n.offset, shown(n.text) + " does not fit " + dtype_); }

  template <typename V>
  V parsed(const Number& n) const {
    V result{};
    const char* last = n.text.data() + n.text.size();
    const auto [stop, error] = std::from_chars(n.text.data(), last, result);
    if (error == std::errc::result_out_of_range) {
      if constexpr (std::is_integral_v<V>) {
        does_not_fit(n);
      } else {
        if (!is_tiny(n.text)) does_not_fit(n);
        return n.text[0] == '-' ? -V{0} : V{0};
      }
    }
    // The grammar was checked, so from_chars reads all of it.
    if (error != std::errc() || stop != last) fail(n.offset, "cannot read the number " + shown(n.text));
    return result;
  }

  T convert(const Number& n) const {
    if constexpr (std::is_integral_v<T>) {
      if (!n.integer) fail(n.offset, "expected an integer for the " + dtype_ + " field, found " + shown(n.text));
      const auto integer = parsed<int64_t>(n);
      if (integer < lo_ || integer > hi_) does_not_fit(n);
      return static_cast<T>(integer);
    } else if constexpr (kIsFloat<T>) {
      return parsed<T>(n);
    } else {
      // See Note [Rounding to float16 and bfloat16].
      const T rounded(to_float_round_to_odd(parsed<double>(n)));
      if (std::isinf(static_cast<float>(rounded))) does_not_fit(n);
      return rounded;
    }
  }

  T from_bool(bool truth) const {
    if constexpr (std::is_integral_v<T> || kIsFloat<T>) {
      return static_cast<T>(truth);
    } else {
      return T(truth ? 1.0f : 0.0f);
    }
  }

  const char* data_;
  const int64_t size_;
  int64_t pos_ = 0;
  const std::string dtype_;
  const int64_t lo_, hi_;  // integer fields: the values that fit
  std::vector<T> values_;
  std::array<int64_t, JsonDecoder::kMaxDepth> counts_{};
  int rank_ = -1;
  int min_rank_ = 0;
};

template <typename T>
at::Tensor decode_as(const char* data, int64_t size, const FieldSpec& spec, std::string_view dtype,
                     int64_t lo = std::numeric_limits<int64_t>::min(),
                     int64_t hi = std::numeric_limits<int64_t>::max()) {
  Parser<T> parser(data, size, dtype, lo, hi);
  parser.parse();
  bool open_ended = false;
  const std::vector<int64_t> found = parser.shape(open_ended);

  // The field's shape: same rank (at least as many dimensions, where empty arrays hide the rest),
  // every fixed dimension equal; a variable first dimension takes any length up to max_length.
  bool match = open_ended ? spec.shape.size() >= found.size() : spec.shape.size() == found.size();
  for (size_t d = 0; match && d < found.size(); ++d) match = (d == 0 && spec.variable()) || found[d] == spec.shape[d];
  if (!match) {
    throw Error(
        "json: " +
        (found.empty() ? std::string("a number (shape [])") : "an array of shape " + shape_text(found, open_ended)) +
        " does not match the field's shape " + shape_text(spec.shape));
  }
  std::vector<int64_t> shape = spec.shape;
  if (spec.variable()) {
    shape[0] = found[0];
    if (spec.max_length && found[0] > *spec.max_length) {
      throw Error("json: an array of shape " + shape_text(found, open_ended) +
                  " is longer than the field's max_length " + std::to_string(*spec.max_length));
    }
  }

  at::Tensor out = at::empty(shape, spec.dtype);
  const std::vector<T>& values = parser.values();
  if (static_cast<size_t>(out.numel()) != values.size() || out.element_size() != static_cast<int64_t>(sizeof(T))) {
    throw Error("json: internal error: " + std::to_string(values.size()) + " values for shape " + shape_text(shape));
  }
  if (!values.empty()) std::memcpy(out.data_ptr(), values.data(), values.size() * sizeof(T));
  return out;
}

// Note [JSON pointers]
// ~~~~~~~~~~~~~~~~~~~~
// With a pointer, the Locator scans the whole document once, checking it as RFC 8259 says (so a
// damaged file fails whichever field reads it), and remembers the bytes of the value the pointer
// selects: an object's member by name (its last one, where a name repeats, as Python's json module
// takes it), an array's element by index. The value parser then reads those bytes as it reads a whole
// document, so a selected value has the same rules and messages, with offsets in the member.
class Locator {
 public:
  Locator(const char* data, int64_t size, const std::vector<std::string>& tokens)
      : data_(data), size_(size), tokens_(tokens) {}

  /// The selected value's bytes [first, second). Throws ferry::Error for malformed JSON (naming the
  /// byte offset) and for a pointer that selects nothing (naming where it stopped).
  std::pair<int64_t, int64_t> find(const std::string& pointer) {
    if (size_ == 0) fail(0, "the member is empty; expected a JSON document");
    skip_space();
    value(0, 0, true);
    skip_space();
    if (pos_ < size_) fail(pos_, "expected nothing after the document, found " + what_is_at(pos_));
    if (begin_ < 0) throw Error("json: nothing at '" + pointer + "': " + missing_);
    return {begin_, end_};
  }

 private:
  void skip_space() {
    while (pos_ < size_ && is_space(data_[pos_])) ++pos_;
  }

  std::string what_is_at(int64_t at) const {
    if (at >= size_) return "the end of the input";
    const auto byte = static_cast<unsigned char>(data_[at]);
    if (byte >= 0x20 && byte < 0x7F) return std::string("'") + static_cast<char>(byte) + "'";
    static constexpr char kHex[] = "0123456789abcdef";
    return std::string("byte 0x") + kHex[byte >> 4] + kHex[byte & 15];
  }

  // Where the path stopped, for the message; the first such place is the one the pointer names.
  void missed(std::string why) {
    if (missing_.empty()) missing_ = std::move(why);
  }

  // One value; `level` tokens of the pointer lead here, and `on_path` says whether they match.
  void value(int depth, size_t level, bool on_path) {
    if (pos_ >= size_) fail(pos_, "expected a value, found the end of the input");
    const int64_t begin = pos_;
    const char c = data_[pos_];
    const bool inside = on_path && level < tokens_.size();
    if (c == '{') {
      object(depth, level, on_path);
    } else if (c == '[') {
      array(depth, level, on_path);
    } else {
      if (c == '"') {
        string(false);
      } else if (!literal("true") && !literal("false") && !literal("null")) {
        if (c != '-' && !is_digit(c)) fail(pos_, "expected a value, found " + what_is_at(pos_));
        number();
      }
      if (inside) {
        missed("'" + tokens_[level] + "' is looked up in " + std::string(c == '"' ? "a string" : "a scalar") +
               " at byte " + std::to_string(begin));
      }
    }
    if (on_path && level == tokens_.size()) {
      begin_ = begin;
      end_ = pos_;
    }
  }

  bool literal(std::string_view word) {
    if (size_ - pos_ >= static_cast<int64_t>(word.size()) && std::string_view(data_ + pos_, word.size()) == word) {
      pos_ += static_cast<int64_t>(word.size());
      return true;
    }
    return false;
  }

  void nested(int depth, int64_t open) const {
    if (depth >= JsonDecoder::kMaxDepth) {
      fail(open, "arrays and objects nested more than " + std::to_string(JsonDecoder::kMaxDepth) + " deep");
    }
  }

  void object(int depth, size_t level, bool on_path) {
    const int64_t open = pos_;
    nested(depth, open);
    const bool inside = on_path && level < tokens_.size();
    bool found = false;
    std::string names;
    ++pos_;
    skip_space();
    if (pos_ < size_ && data_[pos_] == '}') {
      ++pos_;
    } else {
      for (;;) {
        if (pos_ >= size_ || data_[pos_] != '"') fail(pos_, "expected a member's name, found " + what_is_at(pos_));
        const std::string name = string(inside);
        skip_space();
        if (pos_ >= size_ || data_[pos_] != ':') fail(pos_, "expected ':' after a name, found " + what_is_at(pos_));
        ++pos_;
        skip_space();
        const bool match = inside && name == tokens_[level];
        found = found || match;
        if (inside && names.size() < 200) names += (names.empty() ? "" : ", ") + name;
        value(depth + 1, level + 1, match);
        skip_space();
        if (pos_ < size_ && data_[pos_] == '}') {
          ++pos_;
          break;
        }
        if (pos_ >= size_ || data_[pos_] != ',')
          fail(pos_, "expected ',' or '}' in an object, found " + what_is_at(pos_));
        ++pos_;
        skip_space();
      }
    }
    if (inside && !found) {
      missed("the object at byte " + std::to_string(open) + " has no member '" + tokens_[level] + "'" +
             (names.empty() ? std::string(" (it is empty)") : " (its members: " + names + ")"));
    }
  }

  void array(int depth, size_t level, bool on_path) {
    const int64_t open = pos_;
    nested(depth, open);
    const bool inside = on_path && level < tokens_.size();
    // An index is digits without leading zeros ("-", the element after the last, selects nothing).
    int64_t wanted = -1;
    if (inside) {
      const std::string& token = tokens_[level];
      if (!token.empty() && token.size() < 18 && std::all_of(token.begin(), token.end(), is_digit) &&
          (token.size() == 1 || token[0] != '0')) {
        wanted = std::stoll(token);
      }
    }
    int64_t count = 0;
    ++pos_;
    skip_space();
    if (pos_ < size_ && data_[pos_] == ']') {
      ++pos_;
    } else {
      for (;;) {
        value(depth + 1, level + 1, inside && count == wanted);
        ++count;
        skip_space();
        if (pos_ < size_ && data_[pos_] == ']') {
          ++pos_;
          break;
        }
        if (pos_ >= size_ || data_[pos_] != ',')
          fail(pos_, "expected ',' or ']' in an array, found " + what_is_at(pos_));
        ++pos_;
        skip_space();
      }
    }
    if (inside && !(wanted >= 0 && wanted < count)) {
      missed("the array at byte " + std::to_string(open) + " has " + std::to_string(count) + " elements, so '" +
             tokens_[level] + "' is none of them (an index is 0.." + std::to_string(count - 1) + ")");
    }
  }

  // A string at pos_ (its opening quote), checked: escapes, no raw control characters, UTF-8. Returns
  // its text, unescaped, when `keep`.
  std::string string(bool keep) {
    std::string text;
    ++pos_;
    for (;;) {
      if (pos_ >= size_) fail(pos_, "a string is not closed (no '\"' before the end of the input)");
      const auto byte = static_cast<unsigned char>(data_[pos_]);
      if (byte == '"') {
        ++pos_;
        return text;
      }
      if (byte < 0x20) fail(pos_, "a control character (" + what_is_at(pos_) + ") in a string must be escaped");
      if (byte == '\\') {
        escape(keep ? &text : nullptr);
        continue;
      }
      const int64_t start = pos_;
      utf8();
      if (keep) text.append(data_ + start, static_cast<size_t>(pos_ - start));
    }
  }

  // One UTF-8 character at pos_: a shortest form, no surrogates, at most U+10FFFF.
  void utf8() {
    const auto lead = static_cast<unsigned char>(data_[pos_]);
    int extra = 0;
    uint32_t code = lead;
    if (lead >= 0xF0 && lead <= 0xF4) {
      extra = 3;
      code = lead & 0x07u;
    } else if (lead >= 0xE0) {
      extra = lead <= 0xEF ? 2 : -1;
      code = lead & 0x0Fu;
    } else if (lead >= 0xC2) {
      extra = 1;
      code = lead & 0x1Fu;
    } else if (lead >= 0x80) {
      extra = -1;
    }
    if (extra < 0 || size_ - pos_ <= extra)
      fail(pos_, "a string holds bytes that are not UTF-8 (" + what_is_at(pos_) + ")");
    for (int i = 1; i <= extra; ++i) {
      const auto next = static_cast<unsigned char>(data_[pos_ + i]);
      if ((next & 0xC0u) != 0x80u) fail(pos_, "a string holds bytes that are not UTF-8 (" + what_is_at(pos_) + ")");
      code = (code << 6) | (next & 0x3Fu);
    }
    const bool overlong = (extra == 2 && code < 0x800) || (extra == 3 && code < 0x10000);
    if (overlong || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) {
      fail(pos_, "a string holds bytes that are not UTF-8 (an overlong form, a surrogate or past U+10FFFF)");
    }
    pos_ += 1 + extra;
  }

  void escape(std::string* text) {
    const int64_t at = pos_;
    ++pos_;
    if (pos_ >= size_) fail(at, "a string ends in the middle of an escape");
    const char c = data_[pos_++];
    const auto put = [&](char out) {
      if (text != nullptr) text->push_back(out);
    };
    switch (c) {
      case '"': put('"'); return;
      case '\\': put('\\'); return;
      case '/': put('/'); return;
      case 'b': put('\b'); return;
      case 'f': put('\f'); return;
      case 'n': put('\n'); return;
      case 'r': put('\r'); return;
      case 't': put('\t'); return;
      case 'u': break;
      default: fail(at, std::string("an unknown escape '\\") + c + "' in a string");
    }
    uint32_t code = hex4(at);
    if (code >= 0xD800 && code <= 0xDBFF) {  // a high surrogate: its low one follows as \uXXXX
      if (size_ - pos_ < 6 || data_[pos_] != '\\' || data_[pos_ + 1] != 'u') fail(at, "a lone surrogate escape");
      pos_ += 2;
      const uint32_t low = hex4(at);
      if (low < 0xDC00 || low > 0xDFFF) fail(at, "a lone surrogate escape");
      code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    } else if (code >= 0xDC00 && code <= 0xDFFF) {
      fail(at, "a lone surrogate escape");
    }
    if (text == nullptr) return;
    if (code < 0x80) {
      text->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      text->push_back(static_cast<char>(0xC0 | (code >> 6)));
      text->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      text->push_back(static_cast<char>(0xE0 | (code >> 12)));
      text->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      text->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      text->push_back(static_cast<char>(0xF0 | (code >> 18)));
      text->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      text->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      text->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  uint32_t hex4(int64_t at) {
    if (size_ - pos_ < 4) fail(at, "a \\u escape needs four hex digits");
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = data_[pos_++];
      const int digit = is_digit(h)              ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
      if (digit < 0) fail(at, "a \\u escape needs four hex digits");
      code = code * 16 + static_cast<uint32_t>(digit);
    }
    return code;
  }

  // RFC 8259's number grammar, checked without reading the value.
  void number() {
    const int64_t start = pos_;
    if (data_[pos_] == '-') ++pos_;
    if (pos_ >= size_ || !is_digit(data_[pos_])) fail(pos_, "expected a digit after '-', found " + what_is_at(pos_));
    if (data_[pos_] == '0' && pos_ + 1 < size_ && is_digit(data_[pos_ + 1])) {
      fail(start, "leading zeros are not allowed in a number");
    }
    while (pos_ < size_ && is_digit(data_[pos_])) ++pos_;
    if (pos_ < size_ && data_[pos_] == '.') {
      ++pos_;
      if (pos_ >= size_ || !is_digit(data_[pos_])) fail(pos_, "expected a digit after '.', found " + what_is_at(pos_));
      while (pos_ < size_ && is_digit(data_[pos_])) ++pos_;
    }
    if (pos_ < size_ && (data_[pos_] == 'e' || data_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < size_ && (data_[pos_] == '-' || data_[pos_] == '+')) ++pos_;
      if (pos_ >= size_ || !is_digit(data_[pos_])) {
        fail(pos_, "expected a digit in the exponent, found " + what_is_at(pos_));
      }
      while (pos_ < size_ && is_digit(data_[pos_])) ++pos_;
    }
  }

  const char* data_;
  const int64_t size_;
  const std::vector<std::string>& tokens_;
  int64_t pos_ = 0;
  int64_t begin_ = -1, end_ = -1;
  std::string missing_;
};

}  // namespace

JsonDecoder::JsonDecoder(std::string pointer) : pointer_(std::move(pointer)) {
  if (pointer_.empty()) return;
  if (pointer_[0] != '/') {
    throw Error("json: select '" + pointer_ + "' is not a JSON pointer: it starts with '/' (e.g. /boxes)");
  }
  for (size_t begin = 1;;) {
    const size_t end = std::min(pointer_.find('/', begin), pointer_.size());
    std::string token;
    for (size_t i = begin; i < end; ++i) {
      if (pointer_[i] != '~') {
        token.push_back(pointer_[i]);
      } else if (i + 1 < end && (pointer_[i + 1] == '0' || pointer_[i + 1] == '1')) {
        token.push_back(pointer_[++i] == '0' ? '~' : '/');
      } else {
        throw Error("json: select '" + pointer_ + "': a '~' is written ~0, and a '/' inside a name ~1 (RFC 6901)");
      }
    }
    tokens_.push_back(std::move(token));
    if (end == pointer_.size()) break;
    begin = end + 1;
  }
}

at::Tensor JsonDecoder::decode(const at::Tensor& encoded, const FieldSpec& spec) const {
  if (encoded.scalar_type() != at::kByte || encoded.dim() != 1) {
    throw Error("json: the member must be a 1-D uint8 tensor of bytes, found " + dtype_name(encoded.scalar_type()) +
                " with " + std::to_string(encoded.dim()) + " dimensions");
  }
  const at::Tensor bytes = encoded.is_contiguous() ? encoded : encoded.contiguous();
  const auto* data = static_cast<const char*>(bytes.data_ptr());
  int64_t size = bytes.numel();
  int64_t offset = 0;
  if (!pointer_.empty()) {  // Note [JSON pointers]
    const auto [begin, end] = Locator(data, size, tokens_).find(pointer_);
    offset = begin;
    size = end - begin;
  }
  try {
    return decode_value(data + offset, size, spec);
  } catch (const Error& e) {
    if (offset == 0) throw;
    throw Error(e.cause() + " (in the value at '" + pointer_ + "', which starts at byte " + std::to_string(offset) +
                ")");
  }
}

at::Tensor JsonDecoder::decode_value(const char* data, int64_t size, const FieldSpec& spec) const {
  switch (spec.dtype) {
    case at::kByte: return decode_as<uint8_t>(data, size, spec, "uint8", 0, 255);
    case at::kChar: return decode_as<int8_t>(data, size, spec, "int8", -128, 127);
    case at::kShort: return decode_as<int16_t>(data, size, spec, "int16", -32768, 32767);
    case at::kInt:
      return decode_as<int32_t>(data, size, spec, "int32", std::numeric_limits<int32_t>::min(),
                                std::numeric_limits<int32_t>::max());
    case at::kLong: return decode_as<int64_t>(data, size, spec, "int64");
    case at::kBool: return decode_as<uint8_t>(data, size, spec, "bool", 0, 1);
    case at::kHalf: return decode_as<c10::Half>(data, size, spec, "float16");
    case at::kBFloat16: return decode_as<c10::BFloat16>(data, size, spec, "bfloat16");
    case at::kFloat: return decode_as<float>(data, size, spec, "float32");
    case at::kDouble: return decode_as<double>(data, size, spec, "float64");
    default:
      throw Error(
          "json: the decoder makes uint8, int8, int16, int32, int64, bool, float16, bfloat16, float32 "
          "or float64, not " +
          dtype_name(spec.dtype));
  }
}

namespace detail {

DecoderKind json_decoder_kind() {
  DecoderKind kind;
  kind.name = "json";
  kind.description =
      "A JSON number or (nested) array of numbers to a tensor of the field's dtype and shape; with `select`, the "
      "value a JSON pointer names in a document of objects.";
  kind.keys = {{.name = "select",
                .type = KeySpec::Type::kString,
                .description = "A JSON pointer (RFC 6901) to the value to read, so that one `.json` member feeds "
                               "several fields: /boxes, /annotations/0/bbox. Without it the whole document is the "
                               "value.",
                .default_value = "the whole document",
                .example = "/boxes",
                .min = 1,
                .expected = "a JSON pointer such as /boxes"}};
  kind.make = [](const DecoderArgs& args) -> std::shared_ptr<const Decoder> {
    return std::make_shared<JsonDecoder>(args.keys.text_or("select", ""));
  };
  kind.check = [](const KeyValue& field, KeyProblems& problems) {
    if (const KeyValue* select = field.find("select")) {
      try {
        (void)JsonDecoder(select->text());
      } catch (const Error& e) {
        problems.add(*select, e.cause());
      }
    }
  };
  return kind;
}

}  // namespace detail
}  // namespace ferry
