// JsonlSource: every member of every line against what was written, escapes resolved, blank lines
// and CRLF, several fields of one member, concurrent reads, and the errors that name the file and line.
#include <ferry/io/formats/jsonl_source.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/pipeline/error.h>
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

struct Line {
  std::string text;     // the string member as UTF-8
  std::string number;   // the number member's JSON text
  std::string numbers;  // the array member's JSON text
};

std::string bytes_of(const at::Tensor& tensor) {
  return {reinterpret_cast<const char*>(tensor.data_ptr<uint8_t>()), static_cast<size_t>(tensor.numel())};
}

// A random string, as UTF-8 and as JSON writes it (escapes, \u escapes with surrogate pairs, raw UTF-8).
std::pair<std::string, std::string> random_string(std::mt19937& rng) {
  std::string utf8;
  std::string json = "\"";
  const int length = std::uniform_int_distribution<int>(0, 300)(rng);
  for (int i = 0; i < length; ++i) {
    switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
      case 0: utf8 += '"', json += "\\\""; break;
      case 1: utf8 += '\\', json += "\\\\"; break;
      case 2: utf8 += '\n', json += "\\n"; break;
      case 3: utf8 += "\xc3\xa9", json += (rng() % 2 ? "\\u00e9" : "\xc3\xa9"); break;                         // é
      case 4: utf8 += "\xf0\x9f\x98\x80", json += (rng() % 2 ? "\\ud83d\\ude00" : "\xf0\x9f\x98\x80"); break;  // 😀
      default: {
        const char c = static_cast<char>('a' + rng() % 26);
        utf8 += c, json += c;
      }
    }
  }
  return {utf8, json + "\""};
}

// Writes `count` lines of three members in a random order, with blank lines and CRLF endings here and
// there; `lines` gets each sample's values and `numbers` its line number in the file.
void write_file(const std::string& path, int count, std::mt19937& rng, std::vector<Line>& lines,
                std::vector<int>& numbers) {
  std::ofstream out(path, std::ios::binary);
  int number = 0;
  for (int i = 0; i < count; ++i) {
    while (rng() % 5 == 0) {
      out << (rng() % 2 ? "  \n" : "\n");
      ++number;
    }
    auto [utf8, json] = random_string(rng);
    Line line{utf8, std::to_string(static_cast<int64_t>(rng() % 200000) - 100000), ""};
    line.numbers = "[" + std::to_string(rng() % 10) + ", " + std::to_string(rng() % 10) + "]";
    std::vector<std::string> members = {"\"text\": " + json, "\"n\":" + line.number, "\"v\" : " + line.numbers};
    std::shuffle(members.begin(), members.end(), rng);
    out << "{" << members[0] << ", " << members[1] << ",  " << members[2] << " }" << (rng() % 3 ? "\n" : "\r\n");
    lines.push_back(line);
    numbers.push_back(++number);
  }
}

TEST(JsonlSource, EveryMemberOfEveryLineIsWhatWasWritten) {
  testing::TempDir dir("ferry_jsonl_test");
  std::mt19937 rng(7);
  std::vector<Line> lines;
  std::vector<int> a_numbers;
  std::vector<int> b_numbers;
  write_file(dir / "a.jsonl", 300, rng, lines, a_numbers);
  write_file(dir / "b.jsonl", 200, rng, lines, b_numbers);
  JsonlOptions options;
  options.files = {dir / "a.jsonl", dir / "b.jsonl"};
  options.fields = {{.name = "text", .key = "text"},
                    {.name = "again", .key = "text"},  // one member, two fields: read once
                    {.name = "n", .key = "n"},
                    {.name = "v", .key = "v"}};
  const JsonlSource source(options);
  ASSERT_EQ(source.size(), lines.size());
  ASSERT_EQ(source.fields().size(), 4u);

  auto check = [&](uint64_t index) {
    const EncodedSample sample = source.read(index);
    const Line& line = lines[index];
    EXPECT_EQ(bytes_of(sample.fields[0]), line.text) << index;
    EXPECT_EQ(bytes_of(sample.fields[1]), line.text) << index;
    EXPECT_EQ(bytes_of(sample.fields[2]), line.number) << index;
    EXPECT_EQ(bytes_of(sample.fields[3]), line.numbers) << index;
    const bool first = index < a_numbers.size();
    const std::string expected_key = first ? dir / "a.jsonl:" + std::to_string(a_numbers[index])
                                           : dir / "b.jsonl:" + std::to_string(b_numbers[index - a_numbers.size()]);
    EXPECT_EQ(sample.key, expected_key);
    EXPECT_EQ(source.key(index), expected_key);
  };
  for (uint64_t i = 0; i < source.size(); ++i) check(i);
  // Four threads at once, each over every sample.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < source.size(); ++i) check((i * 7 + static_cast<uint64_t>(t)) % source.size());
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_NE(source.describe().find("2 files, 500 lines"), std::string::npos) << source.describe();
}

TEST(JsonlSource, BadLinesAreErrorsNamingTheFileAndLine) {
  testing::TempDir dir("ferry_jsonl_test");
  {
    std::ofstream out(dir / "bad.jsonl");
    out << "{\"text\": \"fine\"}\n\n[1, 2]\n{\"other\": 1}\n{\"text\": \"cut\n{\"text\": \"a\"}{\"text\": \"b\"}\n"
        << "{\"text\": \"a\", \"n\":\n";
  }
  JsonlOptions options;
  options.files = {dir / "bad.jsonl"};
  options.fields = {{.name = "text", .key = "text"}};
  const JsonlSource source(options);
  ASSERT_EQ(source.size(), 6u);
  EXPECT_EQ(bytes_of(source.read(0).fields[0]), "fine");
  auto message = [&](uint64_t index) {
    try {
      (void)source.read(index);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(1).find("bad.jsonl:3: a line must be a JSON object"), std::string::npos) << message(1);
  EXPECT_NE(message(2).find("bad.jsonl:4: no member 'text' (field 'text')"), std::string::npos) << message(2);
  EXPECT_NE(message(3).find("bad.jsonl:5:"), std::string::npos) << message(3);
  EXPECT_NE(message(4).find("bad.jsonl:6: text after the object, at byte 13"), std::string::npos) << message(4);
  EXPECT_NE(message(5).find("bad.jsonl:7:"), std::string::npos) << message(5);
  EXPECT_NE(message(9).find("past the last"), std::string::npos) << message(9);

  {
    std::ofstream out(dir / "empty.jsonl");
    out << "\n \n";
  }
  options.files = {dir / "empty.jsonl"};
  EXPECT_THROW(JsonlSource{options}, Error);
  options.files = {dir / "missing.jsonl"};
  EXPECT_THROW(JsonlSource{options}, Error);
}

}  // namespace
}  // namespace ferry
