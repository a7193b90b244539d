#include <ferry/io/decoders/json_decoder.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/pipeline/error.h>
#include "tests/support/error_text.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tensor_bytes.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;
using testing::tensor_of_text;
using testing::text_of;

FieldSpec spec_of(at::ScalarType dtype, std::vector<int64_t> shape, std::optional<int64_t> max_length = std::nullopt) {
  return FieldSpec{"x", dtype, std::move(shape), max_length, "json"};
}

at::Tensor decode(const std::string& json, const FieldSpec& spec) {
  return JsonDecoder().decode(tensor_of_text(json), spec);
}

// The json text fails with a message holding `what` and "at byte <offset>".
void expect_error(const std::string& json, const FieldSpec& spec, const std::string& what, int64_t offset) {
  SCOPED_TRACE("input: " + json);
  const std::string message = error_of([&] { decode(json, spec); });
  EXPECT_TRUE(contains(message, what)) << message;
  EXPECT_TRUE(contains(message, "at byte " + std::to_string(offset) + ":"))
      << message << " (expected byte " << offset << ")";
}

const std::vector<at::ScalarType> kDtypes{at::kByte, at::kChar, at::kShort,    at::kInt,   at::kLong,
                                          at::kBool, at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};

TEST(JsonDecoder, ReadsScalarsAsZeroDimensionalTensorsOfEveryDtype) {
  for (const at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const at::Tensor one = decode("1", spec_of(dtype, {}));
    EXPECT_EQ(one.scalar_type(), dtype);
    EXPECT_EQ(one.dim(), 0);
    EXPECT_TRUE(one.equal(at::ones({}, dtype)));
    EXPECT_TRUE(decode(" true ", spec_of(dtype, {})).equal(at::ones({}, dtype)));
    EXPECT_TRUE(decode("false", spec_of(dtype, {})).equal(at::zeros({}, dtype)));
    EXPECT_TRUE(decode("0", spec_of(dtype, {})).equal(at::zeros({}, dtype)));
    if (dtype != at::kBool) {
      EXPECT_TRUE(decode("100", spec_of(dtype, {})).equal(at::full({}, 100, dtype)));
    }
    if (dtype != at::kBool && dtype != at::kByte) {
      EXPECT_TRUE(decode("-7", spec_of(dtype, {})).equal(at::full({}, -7, dtype)));
    }
    if (at::isFloatingType(dtype)) {
      EXPECT_TRUE(decode("-2.5", spec_of(dtype, {})).equal(at::full({}, -2.5, dtype)));
      EXPECT_TRUE(decode("1.25e2", spec_of(dtype, {})).equal(at::full({}, 125, dtype)));
      EXPECT_TRUE(decode("5E-1", spec_of(dtype, {})).equal(at::full({}, 0.5, dtype)));
      EXPECT_TRUE(decode("4e+0", spec_of(dtype, {})).equal(at::full({}, 4, dtype)));
    }
  }
}

TEST(JsonDecoder, ReadsNestedArraysOfEveryDtypeInCOrder) {
  for (const at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const int64_t modulo = dtype == at::kBool ? 2 : 100;
    const at::Tensor expected = at::arange(24, at::kLong).remainder(modulo).view({2, 3, 4}).to(dtype);
    std::string json = "[";
    for (int64_t i = 0; i < 2; ++i) {
      json += i ? ", [" : "[";
      for (int64_t j = 0; j < 3; ++j) {
        json += j ? ", [" : "[";
        for (int64_t k = 0; k < 4; ++k) json += (k ? ", " : "") + std::to_string((i * 12 + j * 4 + k) % modulo);
        json += "]";
      }
      json += "]";
    }
    json += "]";
    const at::Tensor decoded = decode(json, spec_of(dtype, {2, 3, 4}));
    EXPECT_EQ(decoded.scalar_type(), dtype);
    EXPECT_TRUE(decoded.is_contiguous());
    EXPECT_TRUE(decoded.equal(expected)) << json;
    EXPECT_TRUE(decode("[1, 0, 1]", spec_of(dtype, {3})).equal(at::tensor({1, 0, 1}, at::kLong).to(dtype)));
    EXPECT_TRUE(decode("[[true], [false]]", spec_of(dtype, {2, 1}))
                    .equal(at::tensor({1, 0}, at::kLong).view({2, 1}).to(dtype)));
  }
}

TEST(JsonDecoder, TakesAnyLengthInAVariableFirstDimension) {
  const FieldSpec boxes = spec_of(at::kFloat, {kVariableLength, 2});
  EXPECT_EQ(decode("[[1, 2], [3, 4], [5, 6]]", boxes).sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(decode("[[1, 2]]", boxes).sizes(), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(decode("[[1.5, 2], [3, -4]]", boxes).equal(at::tensor({1.5f, 2.f, 3.f, -4.f}).view({2, 2})));
  // An empty array is a zero-length first dimension, whatever follows it.
  EXPECT_EQ(decode("[]", boxes).sizes(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(decode(" [ ] ", spec_of(at::kLong, {kVariableLength})).sizes(), (std::vector<int64_t>{0}));
  EXPECT_EQ(decode("[[], []]", spec_of(at::kInt, {2, 0})).sizes(), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(decode("[[], []]", spec_of(at::kInt, {2, 0, 5})).sizes(), (std::vector<int64_t>{2, 0, 5}));
  EXPECT_EQ(decode("[[], [], []]", spec_of(at::kInt, {kVariableLength, 0, 7})).sizes(),
            (std::vector<int64_t>{3, 0, 7}));
  const at::Tensor tokens = decode("[5, 6, 7, 8, 9, 10, 11]", spec_of(at::kLong, {kVariableLength}, 7));
  EXPECT_TRUE(tokens.equal(at::arange(5, 12, at::kLong)));
  const std::string message = error_of([&] { decode("[1, 2, 3]", spec_of(at::kLong, {kVariableLength}, 2)); });
  EXPECT_TRUE(contains(message, "shape [3] is longer than the field's max_length 2")) << message;
}

TEST(JsonDecoder, NamesBothShapesWhenTheyDiffer) {
  const auto expect_mismatch = [](const std::string& json, const FieldSpec& spec, const std::string& found,
                                  const std::string& declared) {
    const std::string message = error_of([&] { decode(json, spec); });
    EXPECT_TRUE(contains(message, found + " does not match the field's shape " + declared)) << message;
  };
  expect_mismatch("[1, 2, 3]", spec_of(at::kFloat, {4}), "an array of shape [3]", "[4]");
  expect_mismatch("[[1, 2, 3]]", spec_of(at::kFloat, {kVariableLength, 4}), "an array of shape [1, 3]", "[*, 4]");
  expect_mismatch("[[1, 2], [3, 4]]", spec_of(at::kFloat, {4}), "an array of shape [2, 2]", "[4]");
  expect_mismatch("[1, 2, 3, 4]", spec_of(at::kFloat, {2, 2}), "an array of shape [4]", "[2, 2]");
  expect_mismatch("7", spec_of(at::kLong, {1}), "a number (shape [])", "[1]");
  expect_mismatch("7", spec_of(at::kLong, {kVariableLength}), "a number (shape [])", "[*]");
  expect_mismatch("[7]", spec_of(at::kLong, {}), "an array of shape [1]", "[]");
  expect_mismatch("[]", spec_of(at::kLong, {3}), "an array of shape [0, ...]", "[3]");
  expect_mismatch("[]", spec_of(at::kLong, {}), "an array of shape [0, ...]", "[]");
  expect_mismatch("[[], []]", spec_of(at::kLong, {2, 3}), "an array of shape [2, 0, ...]", "[2, 3]");
  expect_mismatch("[[], []]", spec_of(at::kLong, {2}), "an array of shape [2, 0, ...]", "[2]");
}

TEST(JsonDecoder, NamesWhatIsWrongWithMalformedInputAndWhere) {
  const FieldSpec any = spec_of(at::kFloat, {kVariableLength});
  expect_error("", any, "the member is empty; expected a number or an array", 0);
  expect_error("  \n ", any, "expected a number or an array, found the end of the input", 4);
  expect_error("\"abc\"", any, "expected a number or an array, found a string", 0);
  expect_error("[1, \"a\"]", any, "expected a number or an array, found a string", 4);
  expect_error("{\"a\": [1]}", any, "expected a number or an array, found an object", 0);
  expect_error("[0, {}]", any, "found an object", 4);
  expect_error("null", any, "expected a number or an array, found null", 0);
  expect_error("[1, null]", any, "found null", 4);
  expect_error("NaN", any, "found 'NaN': NaN and Infinity are not JSON numbers", 0);
  expect_error("[Infinity]", any, "found 'Infinity': NaN and Infinity are not JSON numbers", 1);
  expect_error("[1, -Infinity]", any, "found '-Infinity'", 4);
  expect_error("01", any, "leading zeros are not allowed, found '01'", 0);
  expect_error("[1, -007]", any, "leading zeros are not allowed, found '-007'", 5);
  expect_error("00", any, "leading zeros are not allowed", 0);
  expect_error("-", any, "expected a digit after '-', found the end of the input", 1);
  expect_error("[-a]", any, "expected a digit after '-', found 'a'", 2);
  expect_error("--1", any, "expected a digit after '-', found '-'", 1);
  expect_error("1.", any, "expected a digit after '.', found the end of the input", 2);
  expect_error("1.e5", any, "expected a digit after '.', found 'e'", 2);
  expect_error(".5", any, "expected a number or an array, found '.'", 0);
  expect_error("+1", any, "expected a number or an array, found '+'", 0);
  expect_error("1e", any, "expected a digit in the exponent, found the end of the input", 2);
  expect_error("[2E+]", any, "expected a digit in the exponent, found ']'", 4);
  expect_error("1e-x", any, "expected a digit in the exponent, found 'x'", 3);
  expect_error("[1,]", any, "expected a number or an array, found ']'", 3);
  expect_error("[,1]", any, "expected a number or an array, found ','", 1);
  expect_error("[1 2]", any, "expected ',' or ']' after an array element, found '2'", 3);
  expect_error("[1, 2", any, "expected ',' or ']' after an array element, found the end of the input", 5);
  expect_error("[1;2]", any, "expected ',' or ']' after an array element, found ';'", 2);
  expect_error("[", any, "expected a number or an array, found the end of the input", 1);
  expect_error("]", any, "expected a number or an array, found ']'", 0);
  expect_error("1 2", any, "expected nothing after the value, found '2'", 2);
  expect_error("[1]]", any, "expected nothing after the value, found ']'", 3);
  expect_error("[1], [2]", any, "expected nothing after the value, found ','", 3);
  expect_error("1x", any, "expected nothing after the value, found 'x'", 1);
  expect_error("1.5.3", any, "expected nothing after the value, found '.'", 3);
  expect_error(std::string("[1]\0", 4), any, "expected nothing after the value, found byte 0x00", 3);
  expect_error("tru", any, "expected a number or an array, found 't'", 0);
  expect_error("True", any, "expected a number or an array, found 'T'", 0);
  expect_error("\x01", any, "found byte 0x01", 0);
  expect_error("\xef\xbb\xbf[1]", any, "found byte 0xef", 0);  // a byte-order mark
  expect_error("\v1", any, "found byte 0x0b", 0);              // not JSON whitespace
  expect_error("[1,\f2]", any, "found byte 0x0c", 3);
  expect_error("[[1, 2], [3]]", any, "ragged arrays: this one has length 1, the first one as deep has length 2", 9);
  expect_error("[[1], [2, 3]]", any, "ragged arrays: this one has length 2, the first one as deep has length 1", 6);
  expect_error("[[1], 2]", any, "expected an array, found a number (every number must be nested as deep)", 6);
  expect_error("[[], 2]", any, "expected an array, found a number", 5);
  expect_error("[1, [2]]", any, "expected a number, found an array (every number must be nested as deep)", 4);
  expect_error("[[1], [[2]]]", any, "expected a number, found an array", 7);
  expect_error("[[], [[]]]", any, "ragged arrays: this one has length 1, the first one as deep has length 0", 5);

  // Nesting: 32 arrays deep is fine, 33 is refused where the 33rd opens.
  const std::string deep32 = std::string(32, '[') + "1" + std::string(32, ']');
  EXPECT_EQ(decode(deep32, spec_of(at::kLong, std::vector<int64_t>(32, 1))).numel(), 1);
  const std::string deep33 = std::string(33, '[') + "1" + std::string(33, ']');
  expect_error(deep33, spec_of(at::kLong, std::vector<int64_t>(33, 1)), "arrays nested more than 32 deep", 32);
  expect_error(std::string(100000, '['), any, "arrays nested more than 32 deep", 32);
}

TEST(JsonDecoder, IntegerFieldsTakeExactIntegersThatFit) {
  // Above 2^53 a double would round: 9007199254740993 must stay odd.
  EXPECT_EQ(decode("9007199254740993", spec_of(at::kLong, {})).item<int64_t>(), int64_t{9007199254740993});
  EXPECT_TRUE(decode("[9223372036854775807, -9223372036854775808, -0, 9007199254740993]", spec_of(at::kLong, {4}))
                  .equal(at::tensor({std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                                     int64_t{0}, int64_t{9007199254740993}},
                                    at::kLong)));
  EXPECT_TRUE(
      decode("[2147483647, -2147483648]", spec_of(at::kInt, {2}))
          .equal(at::tensor({std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}, at::kInt)));
  EXPECT_TRUE(decode("[0, 255]", spec_of(at::kByte, {2})).equal(at::tensor({0, 255}, at::kByte)));
  EXPECT_TRUE(decode("[-128, 127]", spec_of(at::kChar, {2})).equal(at::tensor({-128, 127}, at::kChar)));
  EXPECT_TRUE(decode("[-32768, 32767]", spec_of(at::kShort, {2})).equal(at::tensor({-32768, 32767}, at::kShort)));

  expect_error("9223372036854775808", spec_of(at::kLong, {}), "'9223372036854775808' does not fit int64", 0);
  expect_error("[0, -9223372036854775809]", spec_of(at::kLong, {2}), "'-9223372036854775809' does not fit int64", 4);
  expect_error("[1, 100000000000000000000000000000000000000000000000000]", spec_of(at::kLong, {2}),
               "'1000000000000000000000000000000000000000...' does not fit int64", 4);
  expect_error("2147483648", spec_of(at::kInt, {}), "'2147483648' does not fit int32", 0);
  expect_error("-2147483649", spec_of(at::kInt, {}), "'-2147483649' does not fit int32", 0);
  expect_error("[255, 256]", spec_of(at::kByte, {2}), "'256' does not fit uint8", 6);
  expect_error("[0, -1]", spec_of(at::kByte, {2}), "'-1' does not fit uint8", 4);
  expect_error("-129", spec_of(at::kChar, {}), "'-129' does not fit int8", 0);
  expect_error("32768", spec_of(at::kShort, {}), "'32768' does not fit int16", 0);
  expect_error("[true, 2]", spec_of(at::kBool, {2}), "'2' does not fit bool", 7);
  expect_error("[1, 2.5]", spec_of(at::kInt, {2}), "expected an integer for the int32 field, found '2.5'", 4);
  expect_error("1e3", spec_of(at::kLong, {}), "expected an integer for the int64 field, found '1e3'", 0);
  expect_error("1.0", spec_of(at::kByte, {}), "expected an integer for the uint8 field, found '1.0'", 0);
}

// The float whose bits are `bits`, and so on: exact expectations without decimal text.
template <typename T, typename Bits>
T from_bits(Bits bits) {
  static_assert(sizeof(T) == sizeof(Bits));
  T value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

TEST(JsonDecoder, FloatFieldsTakeTheNearestValue) {
  EXPECT_EQ(decode("0.1", spec_of(at::kFloat, {})).item<float>(), 0.1f);
  EXPECT_EQ(decode("0.1", spec_of(at::kDouble, {})).item<double>(), 0.1);
  EXPECT_EQ(decode("3.141592653589793", spec_of(at::kDouble, {})).item<double>(), 3.141592653589793);
  EXPECT_EQ(decode("1.7976931348623157e308", spec_of(at::kDouble, {})).item<double>(),
            std::numeric_limits<double>::max());
  EXPECT_EQ(decode("4.9406564584124654e-324", spec_of(at::kDouble, {})).item<double>(),
            std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(decode("3.4028234663852886e38", spec_of(at::kFloat, {})).item<float>(), std::numeric_limits<float>::max());
  EXPECT_EQ(decode("1.401298464324817e-45", spec_of(at::kFloat, {})).item<float>(),
            std::numeric_limits<float>::denorm_min());
  // float32 rounds the decimal text itself, not its double: 1 + 2^-24 + 2^-60 is above the tie.
  EXPECT_EQ(decode("1.00000005960464477539930798127", spec_of(at::kFloat, {})).item<float>(), 1.0f + 0x1p-23f);
  EXPECT_EQ(decode("65504", spec_of(at::kHalf, {})).item<float>(), 65504.0f);
  EXPECT_EQ(decode("65519.99", spec_of(at::kHalf, {})).item<float>(), 65504.0f);
  EXPECT_EQ(decode("0.1", spec_of(at::kHalf, {})).item<at::Half>().x, c10::Half(0.1f).x);
  EXPECT_EQ(decode("0.1", spec_of(at::kBFloat16, {})).item<at::BFloat16>().x, c10::BFloat16(0.1f).x);
  // See Note [Rounding to float16 and bfloat16]: 1 + 2^-11 + 2^-30 is above the float16 tie between 1
  // and 1 + 2^-10; rounding through float32 would land on the tie and give 1.
  EXPECT_EQ(decode("1.000488282181322574615478515625", spec_of(at::kHalf, {})).item<float>(), 1.0f + 0x1p-10f);
  EXPECT_EQ(decode("1.00048828125", spec_of(at::kHalf, {})).item<float>(), 1.0f);  // the tie itself: to even
  EXPECT_EQ(decode("1.003906250931322574615478515625", spec_of(at::kBFloat16, {})).item<float>(), 1.0f + 0x1p-7f);
  EXPECT_EQ(decode("-1.003906250931322574615478515625", spec_of(at::kBFloat16, {})).item<float>(), -1.0f - 0x1p-7f);
  EXPECT_EQ(decode("1.00390625", spec_of(at::kBFloat16, {})).item<float>(), 1.0f);

  // Too large is an error; too small is a zero of the number's sign.
  expect_error("[1, 3.5e38]", spec_of(at::kFloat, {2}), "'3.5e38' does not fit float32", 4);
  expect_error("-1e39", spec_of(at::kFloat, {}), "'-1e39' does not fit float32", 0);
  expect_error("1e309", spec_of(at::kDouble, {}), "'1e309' does not fit float64", 0);
  expect_error("1e99999999999999999999999", spec_of(at::kDouble, {}), "does not fit float64", 0);
  expect_error("65520", spec_of(at::kHalf, {}), "'65520' does not fit float16", 0);
  expect_error("-1e6", spec_of(at::kHalf, {}), "'-1e6' does not fit float16", 0);
  expect_error("3.4e38", spec_of(at::kBFloat16, {}), "'3.4e38' does not fit bfloat16", 0);
  expect_error("1e400", spec_of(at::kBFloat16, {}), "'1e400' does not fit bfloat16", 0);
  for (const at::ScalarType dtype : {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    for (const char* tiny : {"1e-400", "0.0000000000000000000000000000000000000000000000000000000001e-300",
                             "1e-99999999999999999999999", "0e99999999", "0.000e-5"}) {
      const at::Tensor zero = decode(tiny, spec_of(dtype, {})).to(at::kDouble);
      EXPECT_EQ(zero.item<double>(), 0.0) << tiny;
      EXPECT_FALSE(std::signbit(zero.item<double>())) << tiny;
      std::string negative(1, '-');  // appended: "-" + std::string(...) trips g++ 12's -Wrestrict
      negative += tiny;
      const at::Tensor negative_zero = decode(negative, spec_of(dtype, {})).to(at::kDouble);
      EXPECT_EQ(negative_zero.item<double>(), 0.0) << tiny;
      EXPECT_TRUE(std::signbit(negative_zero.item<double>())) << tiny;
    }
    // 1e-50 is zero in float32, float16 and bfloat16, but not in float64.
    EXPECT_EQ(decode("1e-50", spec_of(dtype, {})).to(at::kDouble).item<double>() == 0.0, dtype != at::kDouble);
    // Large exponents with small significands, and the reverse, are not mistaken for overflow.
    const std::string one_a = "0." + std::string(49, '0') + "1e50";  // 1e-50 x 1e50
    const std::string one_b = "1" + std::string(49, '0') + "e-49";   // 1e49 x 1e-49
    EXPECT_EQ(decode(one_a, spec_of(dtype, {})).to(at::kDouble).item<double>(), 1.0);
    EXPECT_EQ(decode(one_b, spec_of(dtype, {})).to(at::kDouble).item<double>(), 1.0);
  }
}

TEST(JsonDecoder, AcceptsJsonWhitespaceAnywhereBetweenTokens) {
  const at::Tensor expected = at::tensor({1, 2, 3, 4}, at::kInt).view({2, 2});
  for (const std::string& json : {std::string("[[1,2],[3,4]]"), std::string(" \t\r\n[ [ 1 , 2 ] ,\n[3,\t4]\r]\n\n"),
                                  std::string("[\n  [\n    1,\n    2\n  ],\n  [\n    3,\n    4\n  ]\n]\n")}) {
    EXPECT_TRUE(decode(json, spec_of(at::kInt, {2, 2})).equal(expected)) << json;
  }
  EXPECT_EQ(decode("\n\n  -12  \r\n", spec_of(at::kLong, {})).item<int64_t>(), -12);
}

// ---- random round trips ----------------------------------------------------------------------------

// The shortest text that reads back as `value` (std::to_chars), in one of the JSON spellings.
template <typename T>
std::string print_float(T value, std::mt19937_64& rng) {
  char buffer[512];
  const std::chars_format formats[] = {std::chars_format::general, std::chars_format::scientific,
                                       std::chars_format::fixed};
  const std::chars_format format = formats[rng() % (std::fabs(value) < T(1e30) && std::fabs(value) > T(1e-30) ? 3 : 2)];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value, format);
  EXPECT_EQ(error, std::errc());
  std::string text(buffer, end);
  for (char& c : text) {
    if (c == 'e' && rng() % 2) c = 'E';
  }
  // to_chars writes "1e+10"; JSON also takes "1e10".
  const size_t plus = text.find("e+") != std::string::npos ? text.find("e+") : text.find("E+");
  if (plus != std::string::npos && rng() % 2) text.erase(plus + 1, 1);
  return text;
}

// A tensor of `dtype` and `shape` with values drawn over the dtype's whole range (every finite bit
// pattern for floats: subnormals, extremes, -0), and its JSON text with random whitespace.
struct Sample {
  at::Tensor values;
  std::string json;
};

Sample random_sample(at::ScalarType dtype, const std::vector<int64_t>& shape, std::mt19937_64& rng) {
  at::Tensor values = at::empty(shape, dtype);
  const int64_t count = values.numel();
  std::vector<std::string> texts(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const auto slot = static_cast<size_t>(i);
    const bool nice = rng() % 4 == 0;  // small integers and halves too, not only random bits
    const int64_t small = static_cast<int64_t>(rng() % 201) - 100;
    switch (dtype) {
      case at::kBool: {
        const bool truth = rng() % 2;
        values.data_ptr<bool>()[i] = truth;
        texts[slot] = rng() % 2 ? (truth ? "true" : "false") : (truth ? "1" : "0");
        break;
      }
      case at::kByte: {
        const auto v = static_cast<uint8_t>(rng());
        values.data_ptr<uint8_t>()[i] = v;
        texts[slot] = std::to_string(v);
        break;
      }
      case at::kChar: {
        const auto v = static_cast<int8_t>(rng());
        values.data_ptr<int8_t>()[i] = v;
        texts[slot] = std::to_string(v);
        break;
      }
      case at::kShort: {
        const auto v = static_cast<int16_t>(rng());
        values.data_ptr<int16_t>()[i] = v;
        texts[slot] = std::to_string(v);
        break;
      }
      case at::kInt: {
        const auto v = nice ? static_cast<int32_t>(small) : static_cast<int32_t>(rng());
        values.data_ptr<int32_t>()[i] = v;
        texts[slot] = std::to_string(v);
        break;
      }
      case at::kLong: {
        const auto v = nice ? small : static_cast<int64_t>(rng());
        values.data_ptr<int64_t>()[i] = v;
        texts[slot] = std::to_string(v);
        break;
      }
      case at::kHalf:
      case at::kBFloat16: {
        float f = 0;
        uint16_t bits = 0;
        do {
          bits = static_cast<uint16_t>(rng());
          f = dtype == at::kHalf ? static_cast<float>(from_bits<c10::Half>(bits))
                                 : static_cast<float>(from_bits<c10::BFloat16>(bits));
        } while (!std::isfinite(f));
        if (nice) {
          f = static_cast<float>(small) / 2;
          bits = dtype == at::kHalf ? c10::Half(f).x : c10::BFloat16(f).x;
        }
        std::memcpy(static_cast<uint16_t*>(values.data_ptr()) + i, &bits, sizeof bits);
        texts[slot] = print_float(f, rng);
        break;
      }
      case at::kFloat: {
        float f = 0;
        do f = from_bits<float>(static_cast<uint32_t>(rng()));
        while (!std::isfinite(f));
        if (nice) f = static_cast<float>(small) / 2;
        values.data_ptr<float>()[i] = f;
        texts[slot] = print_float(f, rng);
        break;
      }
      case at::kDouble: {
        double d = 0;
        do d = from_bits<double>(static_cast<uint64_t>(rng()));
        while (!std::isfinite(d));
        if (nice) d = static_cast<double>(small) / 2;
        values.data_ptr<double>()[i] = d;
        texts[slot] = print_float(d, rng);
        break;
      }
      default: ADD_FAILURE() << "no generator for " << dtype;
    }
  }
  const auto space = [&] {
    static constexpr const char* kSpaces[] = {"", "", "", " ", "\n", "\t", "\r\n", "  "};
    return std::string(kSpaces[rng() % 8]);
  };
  std::string json = space();
  size_t next = 0;
  // C order: the dimensions' nesting written out, values taken in turn.
  const auto write = [&](const auto& self, size_t dim) -> void {
    if (dim == shape.size()) {
      json += texts[next++];
      return;
    }
    json += "[" + space();
    for (int64_t k = 0; k < shape[dim]; ++k) {
      if (k) json += space() + "," + space();
      self(self, dim + 1);
    }
    json += space() + "]";
  };
  write(write, 0);
  json += space();
  return {values, json};
}

std::vector<int64_t> random_shape(std::mt19937_64& rng) {
  std::vector<int64_t> shape(rng() % 5);
  for (int64_t& d : shape) d = rng() % 10 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 4);
  return shape;
}

TEST(JsonDecoder, RandomTensorsPrintedAsJsonReadBackBitForBit) {
  std::mt19937_64 rng(20240611);
  int nonempty = 0;
  for (int round = 0; round < 3000; ++round) {
    const at::ScalarType dtype = kDtypes[rng() % kDtypes.size()];
    const std::vector<int64_t> shape = random_shape(rng);
    const Sample sample = random_sample(dtype, shape, rng);
    FieldSpec spec = spec_of(dtype, shape);
    if (!shape.empty() && rng() % 2) spec.shape[0] = kVariableLength;
    SCOPED_TRACE(sample.json);
    const at::Tensor decoded = decode(sample.json, spec);
    ASSERT_EQ(decoded.scalar_type(), dtype);
    ASSERT_EQ(decoded.sizes(), sample.values.sizes());
    ASSERT_EQ(text_of(decoded), text_of(sample.values));  // -0 and every subnormal included
    nonempty += sample.values.numel() > 0;
  }
  EXPECT_GT(nonempty, 2000);
}

// ---- damaged input: an Error or a tensor the field allows, never a crash or a read out of bounds ---

TEST(JsonDecoder, RefusesEveryTruncationOfAnArray) {
  std::mt19937_64 rng(7);
  std::vector<std::pair<std::string, FieldSpec>> samples{
      {"[[1.5, -2e-3], [3E+2, 4]]", spec_of(at::kFloat, {2, 2})},
      {"[9007199254740993, -1, 0]", spec_of(at::kLong, {kVariableLength})},
      {"[[[true]], [[false]]]", spec_of(at::kBool, {2, 1, 1})},
      {"[[], []]", spec_of(at::kHalf, {2, 0})},
      {"[]", spec_of(at::kInt, {kVariableLength})},
  };
  for (int i = 0; i < 60; ++i) {
    const at::ScalarType dtype = kDtypes[rng() % kDtypes.size()];
    std::vector<int64_t> shape = random_shape(rng);
    shape.insert(shape.begin(), 1 + static_cast<int64_t>(rng() % 3));  // an array at the top
    samples.emplace_back(random_sample(dtype, shape, rng).json, spec_of(dtype, shape));
  }
  for (const auto& [json, spec] : samples) {
    ASSERT_NO_THROW(decode(json, spec)) << json;
    const size_t last = json.find_last_of(']');
    for (size_t keep = 0; keep <= last; ++keep) {
      const std::string message = error_of([&] { decode(json.substr(0, keep), spec); });
      EXPECT_TRUE(contains(message, "json: at byte ")) << message << " for '" << json.substr(0, keep) << "'";
    }
  }
}

TEST(JsonDecoder, SurvivesTruncatedScalarsAndRandomDamage) {
  const JsonDecoder decoder;
  for (const std::string scalar : {"-12.5e-3", "123", "true", "-0", "1E+9"}) {
    for (size_t keep = 0; keep <= scalar.size(); ++keep) {
      try {
        const at::Tensor out = decoder.decode(tensor_of_text(scalar.substr(0, keep)), spec_of(at::kDouble, {}));
        EXPECT_EQ(out.dim(), 0);
      } catch (const Error&) {
      }
    }
  }
  std::mt19937_64 rng(99);
  const std::string alphabet = "[]{},:-+.eE0123456789 \n\"tnfalsruINay";
  int decoded = 0;
  for (int round = 0; round < 20000; ++round) {
    const at::ScalarType dtype = kDtypes[rng() % kDtypes.size()];
    const std::vector<int64_t> shape = random_shape(rng);
    std::string json = random_sample(dtype, shape, rng).json;
    for (int edits = 0; edits < 1 + round % 3; ++edits) {
      const size_t where = json.empty() ? 0 : rng() % json.size();
      const char c = rng() % 4 ? alphabet[rng() % alphabet.size()] : static_cast<char>(rng());
      switch (rng() % 3) {
        case 0:
          if (!json.empty()) json[where] = c;
          break;
        case 1: json.insert(json.begin() + static_cast<std::ptrdiff_t>(where), c); break;
        default:
          if (!json.empty()) json.erase(where, 1);
      }
    }
    FieldSpec spec = spec_of(dtype, shape);
    if (!shape.empty() && rng() % 2) spec.shape[0] = kVariableLength;
    try {
      const at::Tensor out = decoder.decode(tensor_of_text(json), spec);
      ASSERT_EQ(out.dim(), static_cast<int64_t>(shape.size())) << json;
      for (size_t d = spec.variable() ? 1 : 0; d < shape.size(); ++d)
        ASSERT_EQ(out.size(static_cast<int64_t>(d)), shape[d]) << json;
      ++decoded;
    } catch (const Error& e) {
      ASSERT_TRUE(contains(e.what(), "json: ")) << e.what();
    }
  }
  EXPECT_GT(decoded, 100);  // some edits leave valid JSON (a digit for a digit, a space added)
}

// ---- the rest ------------------------------------------------------------------------------------

TEST(JsonDecoder, RefusesOtherDtypesAndNonByteInput) {
  std::string message = error_of([] { decode("1", spec_of(at::kComplexFloat, {})); });
  EXPECT_TRUE(contains(message, "the decoder makes uint8, int8, int16, int32, int64, bool, float16, bfloat16"))
      << message;
  message = error_of([] { JsonDecoder().decode(at::zeros({3}, at::kInt), spec_of(at::kInt, {})); });
  EXPECT_TRUE(contains(message, "must be a 1-D uint8 tensor")) << message;
  message = error_of([] { JsonDecoder().decode(at::zeros({1, 1}, at::kByte), spec_of(at::kInt, {})); });
  EXPECT_TRUE(contains(message, "must be a 1-D uint8 tensor")) << message;
  // A non-contiguous view of bytes is read in order: every other byte of "[z7z,z8z]z".
  const at::Tensor strided = tensor_of_text("[z7z,z8z]z").view({5, 2}).select(1, 0);
  EXPECT_FALSE(strided.is_contiguous());
  EXPECT_TRUE(JsonDecoder().decode(strided, spec_of(at::kLong, {2})).equal(at::tensor({7, 8}, at::kLong)));
}

at::Tensor select(const std::string& pointer, const std::string& json, const FieldSpec& spec) {
  return JsonDecoder(pointer).decode(tensor_of_text(json), spec);
}

TEST(JsonDecoder, SelectsAValueOfADocumentOfObjectsByJsonPointer) {
  const std::string target =
      R"({"boxes": [[1.5, 2, 30, 40.25], [0, 0, 8, 8]], "labels": [3, 7], "name": "a \"quoted\" \u00e9 name",)"
      R"( "meta": {"size": [480, 640], "tags": ["x", null, true, {"deep": [[1]]}], "a/b": 5, "m~n": 6},)"
      R"( "labels": [4, 9], "empty": []})";
  EXPECT_TRUE(select("/boxes", target, spec_of(at::kFloat, {kVariableLength, 4}))
                  .equal(at::tensor({1.5f, 2.0f, 30.0f, 40.25f, 0.0f, 0.0f, 8.0f, 8.0f}).view({2, 4})));
  // A name given twice: the last one counts, as Python's json module reads it.
  EXPECT_TRUE(select("/labels", target, spec_of(at::kLong, {kVariableLength})).equal(at::tensor({4, 9}, at::kLong)));
  EXPECT_TRUE(select("/meta/size", target, spec_of(at::kInt, {2})).equal(at::tensor({480, 640}, at::kInt)));
  EXPECT_EQ(select("/meta/size/1", target, spec_of(at::kLong, {})).item<int64_t>(), 640);
  EXPECT_EQ(select("/meta/a~1b", target, spec_of(at::kLong, {})).item<int64_t>(), 5);  // ~1 is '/'
  EXPECT_EQ(select("/meta/m~0n", target, spec_of(at::kLong, {})).item<int64_t>(), 6);  // ~0 is '~'
  EXPECT_EQ(select("/meta/tags/3/deep", target, spec_of(at::kByte, {1, 1})).item<uint8_t>(), 1);
  EXPECT_EQ(select("/empty", target, spec_of(at::kFloat, {kVariableLength, 4})).sizes(), (std::vector<int64_t>{0, 4}));
  // Names are compared unescaped.
  EXPECT_EQ(select("/caf\xc3\xa9", R"({"caf\u00e9": 1})", spec_of(at::kLong, {})).item<int64_t>(), 1);
  EXPECT_EQ(select("/", R"({"": 2})", spec_of(at::kLong, {})).item<int64_t>(), 2);  // the empty name
}

TEST(JsonDecoder, SaysWhereAPointerFindsNothing) {
  const FieldSpec any = spec_of(at::kLong, {kVariableLength});
  const std::string json = R"({"labels": [1], "boxes": {"xyxy": [2]}})";
  std::string message = error_of([&] { select("/label", json, any); });
  EXPECT_TRUE(contains(message, "nothing at '/label'")) << message;
  EXPECT_TRUE(contains(message, "has no member 'label' (its members: labels, boxes)")) << message;
  message = error_of([&] { select("/labels/1", json, any); });
  EXPECT_TRUE(contains(message, "has 1 elements, so '1' is none of them")) << message;
  message = error_of([&] { select("/labels/01", json, any); });
  EXPECT_TRUE(contains(message, "'01' is none of them")) << message;
  message = error_of([&] { select("/labels/0/x", json, any); });
  EXPECT_TRUE(contains(message, "'x' is looked up in a scalar")) << message;
  // The selected value is read as a whole document is, with the offset of its start.
  message = error_of([&] { select("/boxes", json, any); });
  EXPECT_TRUE(contains(message, "found an object")) << message;
  EXPECT_TRUE(contains(message, "in the value at '/boxes', which starts at byte 25")) << message;
  // Without a pointer, a document of objects says how to select.
  message = error_of([&] { decode(json, any); });
  EXPECT_TRUE(contains(message, "select: /boxes")) << message;
}

TEST(JsonDecoder, ChecksTheWholeDocumentAroundTheSelectedValue) {
  const FieldSpec any = spec_of(at::kLong, {kVariableLength});
  const auto expect = [&](const std::string& json, const std::string& what) {
    SCOPED_TRACE(json);
    const std::string message = error_of([&] { select("/a", json, any); });
    EXPECT_TRUE(contains(message, what)) << message;
  };
  expect(R"({"a": [1], "b": [1,]})", "expected a value, found ']'");
  expect(R"({"a": [1], "b": "x)", "a string is not closed");
  expect("{\"a\": [1], \"b\": \"\x01\"}", "a control character");
  expect("{\"a\": [1], \"b\": \"\xff\"}", "not UTF-8");
  expect("{\"a\": [1], \"b\": \"\xc0\xaf\"}", "not UTF-8");
  expect(R"({"a": [1], "b": "\x"})", "an unknown escape");
  expect(R"({"a": [1], "b": "\ud800"})", "a lone surrogate escape");
  expect(R"({"a": [1] "b": 2})", "expected ',' or '}' in an object");
  expect(R"({"a": [1], b: 2})", "expected a member's name");
  expect(R"({"a": [1], "b" 2})", "expected ':' after a name");
  expect(R"({"a": [1], "b": 012})", "leading zeros");
  expect(R"({"a": [1], "b": NaN})", "expected a value, found 'N'");
  expect(R"({"a": [1]} x)", "expected nothing after the document");
  expect(std::string(40, '[') + std::string(40, ']'), "nested more than 32 deep");
  expect("", "the member is empty");
  // Every truncation of a valid document fails cleanly.
  const std::string whole = R"({"b": {"c": [1, 2.5e3, "s\u00e9\n"], "d": null}, "a": [[1, 2], [3, 4]]})";
  EXPECT_TRUE(select("/a", whole, spec_of(at::kLong, {kVariableLength, 2}))
                  .equal(at::tensor({1, 2, 3, 4}, at::kLong).view({2, 2})));
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    EXPECT_THROW(select("/a", whole.substr(0, cut), spec_of(at::kLong, {kVariableLength, 2})), Error) << cut;
  }
}

TEST(JsonDecoder, RefusesPointersThatAreNotRfc6901) {
  EXPECT_THROW(JsonDecoder("boxes"), Error);
  EXPECT_THROW(JsonDecoder("/a~2"), Error);
  EXPECT_THROW(JsonDecoder("/a~"), Error);
  EXPECT_NO_THROW(JsonDecoder("/a~0~1/0"));
}

TEST(JsonDecoder, IsBuiltInAndThreadSafe) {
  const auto decoder = DecoderRegistry().find("json");
  EXPECT_EQ(decoder->name(), "json");
  std::mt19937_64 rng(3);
  std::vector<Sample> samples;
  std::vector<FieldSpec> specs;
  for (int i = 0; i < 64; ++i) {
    const at::ScalarType dtype = kDtypes[rng() % kDtypes.size()];
    const std::vector<int64_t> shape = random_shape(rng);
    samples.push_back(random_sample(dtype, shape, rng));
    specs.push_back(spec_of(dtype, shape));
  }
  for (const int threads : {1, 2, 4, 8}) {
    std::vector<std::thread> workers;
    std::vector<int> mismatches(static_cast<size_t>(threads), 0);
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int round = 0; round < 20; ++round) {
          for (size_t i = 0; i < samples.size(); ++i) {
            const at::Tensor out = decoder->decode(tensor_of_text(samples[i].json), specs[i]);
            mismatches[static_cast<size_t>(t)] += text_of(out) != text_of(samples[i].values);
          }
        }
      });
    }
    for (std::thread& worker : workers) worker.join();
    for (const int m : mismatches) EXPECT_EQ(m, 0) << threads << " threads";
  }
}

// ---- against Python's json and struct --------------------------------------------------------------

constexpr const char* kPython = "/usr/bin/python3";

// Numbers written in many spellings; for each, the bytes of float(text) as a double and as
// struct's float16 (which rounds the double once, to nearest even), and of int(text) where it is one.
constexpr const char* kWriteNumbers = R"(
import json, math, random, struct, sys
rng = random.Random(5)
out = open(sys.argv[1], 'w')
def emit(text):
    value = json.loads(text)
    if math.isinf(float(value)):
        out.write('%s - - -\n' % text)  # beyond float64: ferry refuses it, Python reads inf
        return
    d = struct.pack('<d', float(value)).hex()
    try:
        h = struct.pack('<e', float(value)).hex()
    except OverflowError:
        h = '-'
    i = str(value) if isinstance(value, int) and -2**63 <= value < 2**63 else '-'
    out.write('%s %s %s %s\n' % (text, d, h, i))
for _ in range(3000):
    kind = rng.randrange(6)
    if kind == 0:
        text = repr(rng.uniform(-1e6, 1e6))
    elif kind == 1:
        text = '%.*e' % (rng.randrange(0, 25), rng.uniform(-10, 10) * 10.0 ** rng.randrange(-330, 308))
    elif kind == 2:
        text = str(rng.randrange(-2**64, 2**64))
    elif kind == 3:
        # near float16 ties: k/2048 +- tiny, in several binades
        e = rng.randrange(-20, 16)
        text = repr((rng.randrange(1024, 2048) + 0.5) * 2.0 ** (e - 10) * (1 + rng.choice([-1, 0, 1]) * 2.0 ** -40))
    elif kind == 4:
        text = json.dumps(rng.random() * 10.0 ** rng.randrange(-50, 50))
    else:
        exponent = rng.randrange(-400, 400)
        text = '%s%d.%d%s%s%d' % (rng.choice(['', '-']), rng.randrange(0, 10**6), rng.randrange(0, 10**9),
                                  rng.choice(['e', 'E']), '+' if exponent >= 0 and rng.random() < 0.5 else '', exponent)
    if text.lstrip('-') in ('inf', 'nan'):  # '%e' of an overflowed product: not JSON
        continue
    emit(text)
)";

TEST(JsonDecoder, ReadsNumbersAsPythonsJsonAndStructDo) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " not found";
  const testing::TempDir dir("ferry_json_test");
  {
    std::ofstream script(dir / "write_numbers.py");
    script << kWriteNumbers;
  }
  const std::string command = std::string(kPython) + " " + (dir / "write_numbers.py") + " " + (dir / "numbers.txt");
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream lines(dir / "numbers.txt");
  const auto hex_of = [](const at::Tensor& tensor) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string hex;
    for (const char c : text_of(tensor)) {
      const auto byte = static_cast<unsigned char>(c);
      hex += kHex[byte >> 4];
      hex += kHex[byte & 15];
    }
    return hex;
  };
  int count = 0, halves = 0, integers = 0, too_large = 0;
  for (std::string text, d, h, i; lines >> text >> d >> h >> i;) {
    SCOPED_TRACE(text);
    ++count;
    if (d == "-") {
      EXPECT_TRUE(contains(error_of([&] { decode(text, spec_of(at::kDouble, {})); }), "does not fit float64"));
      ++too_large;
    } else {
      EXPECT_EQ(hex_of(decode(text, spec_of(at::kDouble, {}))), d);
    }
    if (h != "-") {
      EXPECT_EQ(hex_of(decode(text, spec_of(at::kHalf, {}))), h);
      ++halves;
    } else {
      EXPECT_TRUE(contains(error_of([&] { decode(text, spec_of(at::kHalf, {})); }), "does not fit float16"));
    }
    if (i != "-") {
      EXPECT_EQ(decode(text, spec_of(at::kLong, {})).item<int64_t>(), std::stoll(i));
      ++integers;
    }
  }
  EXPECT_GT(count, 2900);
  EXPECT_GT(halves, 1000);
  EXPECT_GT(too_large, 10);
  EXPECT_GT(integers, 100);
}

}  // namespace
}  // namespace ferry
