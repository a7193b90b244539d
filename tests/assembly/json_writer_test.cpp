#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include <ferry/assembly/json_writer.h>

namespace ferry {
namespace {

TEST(JsonWriter, EscapesQuotesBackslashesAndEveryControlCharacter) {
  EXPECT_EQ(JsonWriter::quote(R"(say "hi" \ bye)"), R"("say \"hi\" \\ bye")");
  EXPECT_EQ(JsonWriter::quote("a\nb\tc\rd"), R"("a\u000ab\u0009c\u000dd")");
  std::string controls;
  for (int c = 0; c < 0x20; ++c) controls.push_back(static_cast<char>(c));
  const std::string quoted = JsonWriter::quote(controls);
  EXPECT_EQ(quoted.substr(0, 13), R"("\u0000\u0001)");
  EXPECT_EQ(quoted.size(), 2 + 32 * 6u) << quoted;
  EXPECT_EQ(quoted.find_first_of(controls), std::string::npos) << "no raw control character left";
  EXPECT_EQ(JsonWriter::quote("\x7f/"), "\"\x7f/\"") << "DEL and slash need no escape";
  EXPECT_EQ(JsonWriter::quote(""), "\"\"");
}

TEST(JsonWriter, KeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(JsonWriter::quote("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\xa2"),
            "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\xa2\"");
  EXPECT_EQ(JsonWriter::quote("a\xff"
                              "b"),
            R"("a\ufffdb")")
      << "a byte never valid in UTF-8";
  EXPECT_EQ(JsonWriter::quote("\xc3"), R"("\ufffd")") << "a truncated sequence";
  EXPECT_EQ(JsonWriter::quote("\xc0\xaf"), R"("\ufffd\ufffd")") << "an overlong slash";
  EXPECT_EQ(JsonWriter::quote("\xed\xa0\x80"), R"("\ufffd\ufffd\ufffd")") << "a UTF-16 surrogate";
  EXPECT_EQ(JsonWriter::quote("\xf4\x90\x80\x80"), R"("\ufffd\ufffd\ufffd\ufffd")") << "past U+10FFFF";
  EXPECT_EQ(JsonWriter::quote("\x80x"), R"("\ufffdx")") << "a stray continuation byte";
}

TEST(JsonWriter, WritesNestedValuesInCallOrder) {
  std::ostringstream out;
  JsonWriter json(out, 0);
  json.begin_object()
      .key("b")
      .value(1)
      .key("a")
      .begin_array()
      .value(true)
      .value(false)
      .null()
      .value("x")
      .end_array()
      .key("empty")
      .begin_object()
      .end_object()
      .key("none")
      .begin_array()
      .end_array()
      .key("n")
      .value(int64_t{-5})
      .key("big")
      .value(std::numeric_limits<uint64_t>::max())
      .end_object();
  EXPECT_TRUE(json.done());
  EXPECT_EQ(out.str(), R"({"b":1,"a":[true,false,null,"x"],"empty":{},"none":[],"n":-5,"big":18446744073709551615})");
}

TEST(JsonWriter, IndentsEachLevel) {
  std::ostringstream out;
  JsonWriter json(out, 2);
  json.begin_object()
      .key("a")
      .begin_array()
      .value(1)
      .value(2)
      .end_array()
      .key("b")
      .begin_object()
      .end_object()
      .end_object();
  EXPECT_EQ(out.str(), "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}");
}

TEST(JsonWriter, WritesShortestRoundTripNumbersAndNullForWhatJsonCannotHold) {
  std::ostringstream out;
  JsonWriter json(out, 0);
  json.begin_array()
      .value(0.1)
      .value(2.0)
      .value(1e-7)
      .value(-0.5)
      .value(std::numeric_limits<double>::quiet_NaN())
      .value(std::numeric_limits<double>::infinity())
      .value(-std::numeric_limits<double>::infinity())
      .end_array();
  EXPECT_EQ(out.str(), "[0.1,2,1e-07,-0.5,null,null,null]");
}

TEST(JsonWriter, StringOverloadsAreNotTakenForBooleans) {
  std::ostringstream out;
  JsonWriter json(out, 0);
  const std::string text = "s";
  json.begin_array().value("literal").value(text).value(std::string_view("view")).value(true).end_array();
  EXPECT_EQ(out.str(), R"(["literal","s","view",true])");
}

TEST(JsonWriter, RejectsMisuseInsteadOfWritingInvalidJson) {
  std::ostringstream out;
  {
    JsonWriter json(out);
    json.begin_object();
    EXPECT_THROW(json.value(1), std::logic_error) << "a value without a key";
    json.key("k");
    EXPECT_THROW(json.key("again"), std::logic_error) << "two keys in a row";
    EXPECT_THROW(json.end_object(), std::logic_error) << "a key without its value";
    EXPECT_THROW(json.end_array(), std::logic_error) << "closing what is not open";
  }
  {
    JsonWriter json(out);
    EXPECT_THROW(json.key("k"), std::logic_error) << "a key outside an object";
    json.begin_array();
    EXPECT_THROW(json.key("k"), std::logic_error) << "a key inside an array";
    json.end_array();
    EXPECT_THROW(json.value(1), std::logic_error) << "a second top-level value";
  }
}

}  // namespace
}  // namespace ferry
