// Text written into JSON strings: every byte string gives valid JSON, well-formed UTF-8 is kept as it
// is, and a byte that is not UTF-8 is written the way its reader wants (InvalidUtf8), read back by a
// strict JSON parser (simdjson) or, for Python's surrogateescape, by undoing the escapes.
#include <random>
#include <string>

#include <gtest/gtest.h>
#include <simdjson.h>

#include <ferry/pipeline/utf8.h>

namespace ferry::detail {
namespace {

std::string escaped(std::string_view text, InvalidUtf8 invalid) {
  std::string out;
  append_json_escaped(out, text, invalid);
  return out;
}

// `code` (below U+0800) in UTF-8.
std::string utf8_of(unsigned code) {
  if (code < 0x80) return std::string(1, static_cast<char>(code));
  return {static_cast<char>(0xC0 | (code >> 6)), static_cast<char>(0x80 | (code & 0x3F))};
}

// What a reader gets back from `text` written under `invalid`: valid sequences as they are, each other
// byte as the policy maps it (for kSurrogateEscape the byte itself, as os.fsencode() gives it).
std::string expected_reading(std::string_view text, InvalidUtf8 invalid) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (const size_t length = utf8_sequence_length(text.substr(i)); length != 0) {
      out.append(text.substr(i, length));
      i += length;
      continue;
    }
    const auto byte = static_cast<unsigned char>(text[i++]);
    switch (invalid) {
      case InvalidUtf8::kReplacement: out += "\xef\xbf\xbd"; break;
      case InvalidUtf8::kLatin1: out += utf8_of(byte); break;
      case InvalidUtf8::kSurrogateEscape: out.push_back(static_cast<char>(byte)); break;
    }
  }
  return out;
}

// Undoes the escapes append_json_escaped writes, \udcXX as the byte XX (simdjson refuses a lone surrogate,
// as strict parsers do; Python's json takes it).
std::string read_surrogate_escaped(const std::string& json) {
  std::string out;
  for (size_t i = 0; i < json.size(); ++i) {
    if (json[i] != '\\') {
      out.push_back(json[i]);
      continue;
    }
    const char e = json[++i];
    if (e != 'u') {
      out.push_back(e);  // \" or \\, the only others it writes
      continue;
    }
    const unsigned code = static_cast<unsigned>(std::stoul(json.substr(i + 1, 4), nullptr, 16));
    i += 4;
    EXPECT_TRUE(code < 0x20 || (code >= 0xDC80 && code <= 0xDCFF)) << json;
    out.push_back(static_cast<char>(code & 0xFF));
  }
  return out;
}

TEST(JsonEscaped, EachPolicyWritesAByteThatIsNotUtf8ItsOwnWay) {
  const std::string text = "caf\xe9 \xc3\xa9\"\\\n";  // Latin-1 é, UTF-8 é, a quote, a backslash, a newline
  EXPECT_EQ(escaped(text, InvalidUtf8::kReplacement), "caf\\ufffd \xc3\xa9\\\"\\\\\\u000a");
  EXPECT_EQ(escaped(text, InvalidUtf8::kLatin1), "caf\\u00e9 \xc3\xa9\\\"\\\\\\u000a");
  EXPECT_EQ(escaped(text, InvalidUtf8::kSurrogateEscape), "caf\\udce9 \xc3\xa9\\\"\\\\\\u000a");
  std::string out = "kept:";
  append_json_escaped(out, "", InvalidUtf8::kLatin1);
  EXPECT_EQ(out, "kept:") << "appends, and nothing for empty text";
}

TEST(JsonEscaped, AnyBytesGiveValidJsonThatReadsBackAsThePolicySays) {
  std::mt19937 random(20261130);
  simdjson::dom::parser parser;
  for (int round = 0; round < 2000; ++round) {
    // Mostly bytes of every value, sometimes well-formed multi-byte sequences among them.
    std::string text;
    const size_t length = random() % 40;
    for (size_t i = 0; i < length; ++i) {
      if (random() % 4 == 0) {
        text += random() % 2 == 0 ? "\xc3\xa9" : "\xf0\x9f\x9a\xa2";
      } else {
        text.push_back(static_cast<char>(random() % 256));
      }
    }
    for (const InvalidUtf8 invalid : {InvalidUtf8::kReplacement, InvalidUtf8::kLatin1}) {
      const std::string json = "\"" + escaped(text, invalid) + "\"";
      std::string_view read;
      ASSERT_EQ(parser.parse(json).get(read), simdjson::SUCCESS) << "round " << round << ": " << json;
      EXPECT_EQ(std::string(read), expected_reading(text, invalid)) << "round " << round;
    }
    const std::string surrogates = escaped(text, InvalidUtf8::kSurrogateEscape);
    for (size_t i = 0; i < surrogates.size();) {
      const size_t step = utf8_sequence_length(std::string_view(surrogates).substr(i));
      ASSERT_NE(step, 0u) << "round " << round << ": the JSON text itself is UTF-8";
      ASSERT_GE(static_cast<unsigned char>(surrogates[i]), 0x20) << "round " << round << ": no raw control byte";
      i += step;
    }
    EXPECT_EQ(read_surrogate_escaped(surrogates), expected_reading(text, InvalidUtf8::kSurrogateEscape))
        << "round " << round;
  }
}

}  // namespace
}  // namespace ferry::detail
