#include <ferry/io/formats/tar_shard_source.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/io/decoders/label_decoder.h>
#include <ferry/io/formats/tar_writer.h>
#include <ferry/pipeline/error.h>
#include <ferry/pipeline/work_items.h>
#include <ferry/stages/decode_stage.h>
#include "tests/support/error_text.h"
#include "tests/support/temp_dir.h"

extern char** environ;

namespace ferry {
namespace {

using testing::error_of;
using testing::TempDir;

constexpr const char* kPython = "/usr/bin/python3";

std::string random_bytes(std::mt19937_64& rng, size_t size) {
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

std::string bytes_of(const at::Tensor& tensor) {
  EXPECT_EQ(tensor.scalar_type(), at::kByte);
  EXPECT_EQ(tensor.dim(), 1);
  const at::Tensor contiguous = tensor.contiguous();
  return std::string(static_cast<const char*>(contiguous.data_ptr()), static_cast<size_t>(contiguous.numel()));
}

void expect_contains(const std::string& text, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts)
    EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// What a sample should hold: its key in the shard and its members' bytes by extension.
struct Expected {
  std::string key;  // "<shard path>:<member key>"
  std::map<std::string, std::string> members;
};

// Shards of random samples, each with a jpg (random bytes, sizes 0..3000 and around 512), a cls
// label and, for every other sample, a json; written in rotating name dialects, some keys long.
struct Dataset {
  std::vector<std::string> paths;
  std::vector<Expected> samples;  // by global index
};

Dataset write_dataset(const TempDir& dir, std::mt19937_64& rng, const std::vector<size_t>& samples_per_shard) {
  static const std::vector<size_t> kSizes = {0, 1, 511, 512, 513, 1024};
  Dataset dataset;
  for (size_t s = 0; s < samples_per_shard.size(); ++s) {
    const TarLongNames dialect = s % 3 == 0   ? TarLongNames::kGnu
                                 : s % 3 == 1 ? TarLongNames::kPax
                                              : TarLongNames::kUstarPrefix;
    TarWriter writer(dialect);
    char name[32];
    std::snprintf(name, sizeof name, "shard-%06zu.tar", s);
    const std::string path = dir / name;
    for (size_t i = 0; i < samples_per_shard[s]; ++i) {
      char number[24];
      std::snprintf(number, sizeof number, "%06zu", i);
      const std::string key = i % 5 == 0 ? std::string(80, 'l') + "/" + std::string(40, 'o') + "/" + number : number;
      Expected sample{path + ":" + key, {}};
      sample.members["jpg"] = random_bytes(rng, rng() % 2 ? kSizes[rng() % kSizes.size()] : rng() % 3000);
      sample.members["cls"] = std::to_string(rng() % 1000) + "\n";
      if (i % 2 == 0) sample.members["json"] = "{\"i\": " + std::to_string(i) + "}";
      for (const char* extension : {"jpg", "cls", "json"}) {
        if (sample.members.count(extension)) writer.add(key + "." + extension, sample.members[extension]);
      }
      dataset.samples.push_back(std::move(sample));
    }
    TarWriter::write_file(path, writer.finish());
    dataset.paths.push_back(path);
  }
  return dataset;
}

std::vector<TarField> image_label_json_fields() {
  return {TarField{"image", "jpg"}, TarField{"label", "cls", at::kLong, {}, std::nullopt, "label"},
          TarField{"meta", ".JSON", at::kByte, {kVariableLength}, 4096, "raw", /*optional=*/true}};
}

// An optional member's bytes: "absent" where the sample lacks it (an undefined tensor).
std::string optional_bytes(const at::Tensor& tensor) { return tensor.defined() ? bytes_of(tensor) : "absent"; }

void expect_sample(const TarShardSource& source, uint64_t index, const Expected& expected) {
  const EncodedSample sample = source.read(index);
  EXPECT_EQ(sample.index, index);
  EXPECT_EQ(sample.key, expected.key);
  EXPECT_EQ(source.key(index), expected.key);
  ASSERT_EQ(sample.fields.size(), 4u);  // the optional meta and its flag
  EXPECT_EQ(bytes_of(sample.fields[0]), expected.members.at("jpg")) << expected.key;
  EXPECT_EQ(bytes_of(sample.fields[1]), expected.members.at("cls")) << expected.key;
  const auto json = expected.members.find("json");
  EXPECT_EQ(optional_bytes(sample.fields[2]), json == expected.members.end() ? "absent" : json->second) << expected.key;
  EXPECT_EQ(sample.fields[3].item<bool>(), json != expected.members.end()) << expected.key;
}

TEST(TarShardSource, NumbersSamplesOverShardsInOrderAndDeliversEveryByte) {
  const TempDir dir("ferry_tar_source");
  std::mt19937_64 rng(1);
  const Dataset dataset = write_dataset(dir, rng, {7, 0, 12, 1, 9});  // an empty shard included
  const TarShardSource source(TarShardOptions{dataset.paths, image_label_json_fields()});

  ASSERT_EQ(source.size(), dataset.samples.size());
  for (uint64_t i = 0; i < source.size(); ++i) expect_sample(source, i, dataset.samples[i]);

  ASSERT_EQ(source.fields().size(), 4u);
  EXPECT_EQ(source.fields()[3].name, "meta_present");
  EXPECT_EQ(source.fields()[3].dtype, at::kBool);
  EXPECT_EQ(source.fields()[0].name, "image");
  EXPECT_TRUE(source.fields()[0].variable());
  EXPECT_EQ(source.fields()[1].decoder, "label");
  EXPECT_EQ(source.fields()[1].dtype, at::kLong);
  EXPECT_EQ(source.fields()[2].max_length, std::optional<int64_t>(4096));
  EXPECT_EQ(source.describe(), "tar(5 shards, 29 samples, fields=jpg,cls,json)");

  ASSERT_EQ(source.shard_count(), 5u);
  const std::vector<std::pair<uint64_t, uint64_t>> ranges = {{0, 7}, {7, 7}, {7, 19}, {19, 20}, {20, 29}};
  for (size_t s = 0; s < ranges.size(); ++s) {
    EXPECT_EQ(source.shard_samples(s).begin, ranges[s].first);
    EXPECT_EQ(source.shard_samples(s).end, ranges[s].second);
    EXPECT_EQ(source.shard(s).path(), dataset.paths[s]);
    for (uint64_t i = ranges[s].first; i < ranges[s].second; ++i) EXPECT_EQ(source.shard_of(i), s) << i;
  }
  EXPECT_THROW(source.shard_of(29), Error);
  EXPECT_THROW(source.shard_samples(5), Error);
  expect_contains(error_of([&] { source.read(29); }), {"sample 29", "29 samples"});
}

TEST(TarShardSource, DefaultFieldsComeFromTheFirstSampleByExtension) {
  const TempDir dir("ferry_tar_source");
  std::mt19937_64 rng(2);
  const Dataset dataset = write_dataset(dir, rng, {0, 4, 5});
  const TarShardSource source(TarShardOptions{dataset.paths, {}});
  ASSERT_EQ(source.fields().size(), 3u);
  const std::vector<std::string> names = {"jpg", "cls", "json"};
  for (size_t f = 0; f < 3; ++f) EXPECT_EQ(source.fields()[f].name, names[f]);
  EXPECT_EQ(source.fields()[0].decoder, "raw");
  EXPECT_EQ(source.fields()[0].dtype, at::kByte);
  EXPECT_EQ(source.fields()[0].shape, std::vector<int64_t>{kVariableLength});
  EXPECT_EQ(source.fields()[0].max_length, std::nullopt);
  EXPECT_EQ(source.fields()[1].decoder, "label");
  EXPECT_EQ(source.fields()[1].dtype, at::kLong);
  EXPECT_TRUE(source.fields()[1].shape.empty());
  EXPECT_EQ(source.fields()[2].decoder, "raw");
  EXPECT_EQ(source.describe(), "tar(3 shards, 9 samples, fields=jpg,cls,json)");
  // Defaults are required: sample 1 has no json.
  expect_contains(error_of([&] { source.read(1); }),
                  {dataset.paths[1], "'000001'", "'.json'", "field 'json'", "jpg, cls"});
  EXPECT_EQ(bytes_of(source.read(2).fields[2]), dataset.samples[2].members.at("json"));
}

TEST(TarShardSource, AMissingRequiredMemberFailsThatSampleOnlyAndAnOptionalOneIsEmpty) {
  const TempDir dir("ferry_tar_source");
  TarWriter writer;
  writer.add("000000.jpg", "a");
  writer.add("000000.cls", "1");
  writer.add("000001.jpg", "b");  // no cls
  writer.add("000002.jpg", "c");
  writer.add("000002.cls", "3");
  const std::string path = dir / "missing.tar";
  TarWriter::write_file(path, writer.finish());
  TarShardSource source(TarShardOptions{{path}, {TarField{"image", "jpg"}, TarField{"label", "cls"}}});
  EXPECT_EQ(bytes_of(source.read(0).fields[1]), "1");
  expect_contains(error_of([&] { source.read(1); }), {"tar shard '" + path + "'", "sample '000001'", "index 1",
                                                      "header at byte 2048", "no '.cls' member", "field 'label'"});
  EXPECT_EQ(bytes_of(source.read(2).fields[1]), "3");

  TarShardSource lenient(TarShardOptions{
      {path},
      {TarField{"image", "jpg"}, TarField{"label", "cls", at::kByte, {kVariableLength}, std::nullopt, "raw", true}}});
  EXPECT_EQ(lenient.read(1).fields[1].numel(), 0);
  EXPECT_EQ(lenient.read(1).key, path + ":000001");
}

TEST(TarShardSource, TwoFieldsMayReadTheSameMember) {
  const TempDir dir("ferry_tar_source");
  TarWriter writer;
  writer.add("k.cls", "42");
  TarWriter::write_file(dir / "same.tar", writer.finish());
  const TarShardSource source(TarShardOptions{
      {dir / "same.tar"}, {TarField{"text", "cls"}, TarField{"label", "cls", at::kLong, {}, std::nullopt, "label"}}});
  const EncodedSample sample = source.read(0);
  EXPECT_EQ(bytes_of(sample.fields[0]), "42");
  EXPECT_EQ(bytes_of(sample.fields[1]), "42");
}

TEST(TarShardSource, ConcurrentReadsDeliverExactlyTheWrittenBytes) {
  const TempDir dir("ferry_tar_source");
  std::mt19937_64 rng(3);
  const Dataset dataset = write_dataset(dir, rng, {40, 33, 27, 50});
  const TarShardSource source(TarShardOptions{dataset.paths, image_label_json_fields()});
  for (const int threads : {1, 2, 4, 8}) {
    SCOPED_TRACE(threads);
    std::atomic<int> mismatches{0};
    std::atomic<int> reads{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937_64 local(static_cast<uint64_t>(100 * threads + t));
        for (int n = 0; n < 400; ++n) {
          const uint64_t index = local() % source.size();
          const EncodedSample sample = source.read(index);
          const Expected& expected = dataset.samples[index];
          const auto json = expected.members.find("json");
          const bool same =
              sample.key == expected.key && bytes_of(sample.fields[0]) == expected.members.at("jpg") &&
              bytes_of(sample.fields[1]) == expected.members.at("cls") &&
              optional_bytes(sample.fields[2]) == (json == expected.members.end() ? "absent" : json->second);
          mismatches += same ? 0 : 1;
          ++reads;
        }
      });
    }
    for (std::thread& worker : workers) worker.join();
    EXPECT_EQ(reads.load(), 400 * threads);
    EXPECT_EQ(mismatches.load(), 0);
  }
}

TEST(TarShardSource, LabelsDecodeThroughTheDecodeStageAndABadOneNamesSampleAndField) {
  const TempDir dir("ferry_tar_source");
  TarWriter writer;
  writer.add("000000.jpg", "a");
  writer.add("000000.cls", "17\n");
  writer.add("000001.jpg", "b");
  writer.add("000001.cls", "x");
  const std::string path = dir / "labels.tar";
  TarWriter::write_file(path, writer.finish());
  auto source = std::make_shared<const TarShardSource>(TarShardOptions{{path}, {}});
  DecodeStage decode(source, DecoderRegistry::global());
  auto plan = std::make_shared<BatchPlan>();
  plan->sample_indices = {0, 1};

  SampleWork good;
  good.plan = plan;
  good.position = 0;
  decode.run(good);
  ASSERT_EQ(good.fields.size(), 2u);
  EXPECT_EQ(good.fields[1].scalar_type(), at::kLong);
  EXPECT_EQ(good.fields[1].dim(), 0);
  EXPECT_EQ(good.fields[1].item<int64_t>(), 17);
  EXPECT_EQ(bytes_of(good.fields[0]), "a");

  SampleWork bad;
  bad.plan = plan;
  bad.position = 1;
  expect_contains(error_of([&] { decode.run(bad); }), {path + ":000001", "field 'cls'", "decoder 'label'", "'x'"});
}

TEST(TarShardSource, RejectsUnusableShardsAndFields) {
  const TempDir dir("ferry_tar_source");
  std::mt19937_64 rng(4);
  const Dataset dataset = write_dataset(dir, rng, {3, 3});
  const auto make = [&](std::vector<std::string> shards, std::vector<TarField> fields) {
    return error_of([&] { TarShardSource source(TarShardOptions{std::move(shards), std::move(fields)}); });
  };
  expect_contains(make({}, {}), {"no shards"});
  TarWriter::write_file(dir / "bad.tar", std::string(1536, 'z'));
  expect_contains(make({dataset.paths[0], dir / "bad.tar", dir / "nope.tar"}, {}), {dir / "bad.tar", "byte 0"});
  TarWriter::write_file(dir / "empty.tar", TarWriter().finish());
  expect_contains(make({dir / "empty.tar"}, {}), {"no samples"});
  expect_contains(make(dataset.paths, {TarField{"image", "png"}}),
                  {"field 'image'", "'.png'", "no shard", "cls, jpg, json"});
  expect_contains(make(dataset.paths, {TarField{"a", "jpg"}, TarField{"a", "cls"}}), {"field 'a' appears twice"});
  expect_contains(make(dataset.paths, {TarField{"", "jpg"}}), {"a field has no name"});
  expect_contains(make(dataset.paths, {TarField{"a", ""}}), {"field 'a' has no extension"});
  expect_contains(make(dataset.paths, {TarField{"a", "jpg", at::kByte, {3, -2}}}), {"field 'a'", "sizes are >= 0"});
  expect_contains(make(dataset.paths, {TarField{"a", "jpg", at::kByte, {3}, 5}}), {"field 'a'", "max_length"});
  // An optional field no shard has is allowed: every sample lacks it.
  const TarShardSource source(TarShardOptions{
      dataset.paths, {TarField{"a", "jpg"}, TarField{"b", "png", at::kByte, {kVariableLength}, {}, "raw", true}}});
  EXPECT_FALSE(source.read(4).fields[1].defined());
  EXPECT_FALSE(source.read(4).fields[2].item<bool>());
}

TEST(TarShardSource, ExpandsBraceRangesAndListsAsWebDatasetDoes) {
  using Paths = std::vector<std::string>;
  EXPECT_EQ(TarShardSource::expand_braces("data/shard-{000000..000002}.tar"),
            (Paths{"data/shard-000000.tar", "data/shard-000001.tar", "data/shard-000002.tar"}));
  EXPECT_EQ(TarShardSource::expand_braces("s{8..11}"), (Paths{"s8", "s9", "s10", "s11"}));
  EXPECT_EQ(TarShardSource::expand_braces("s{08..10}"), (Paths{"s08", "s09", "s10"}));
  EXPECT_EQ(TarShardSource::expand_braces("s{3..1}"), (Paths{"s3", "s2", "s1"}));
  EXPECT_EQ(TarShardSource::expand_braces("s{-1..1}"), (Paths{"s-1", "s0", "s1"}));
  EXPECT_EQ(TarShardSource::expand_braces("{a,b}/{0..1}.tar"), (Paths{"a/0.tar", "a/1.tar", "b/0.tar", "b/1.tar"}));
  EXPECT_EQ(TarShardSource::expand_braces("{train,}x"), (Paths{"trainx", "x"}));
  EXPECT_EQ(TarShardSource::expand_braces("plain.tar"), (Paths{"plain.tar"}));
  EXPECT_EQ(TarShardSource::expand_braces("s-{000000..999999}.tar").size(), 1000000u);
  expect_contains(error_of([] { TarShardSource::expand_braces("s{0..2"); }), {"never closed"});
  expect_contains(error_of([] { TarShardSource::expand_braces("s0..2}"); }), {"closes no brace"});
  expect_contains(error_of([] { TarShardSource::expand_braces("{a,{b,c}}"); }), {"nested"});
  expect_contains(error_of([] { TarShardSource::expand_braces("{a..z}"); }), {"two integers"});
  expect_contains(error_of([] { TarShardSource::expand_braces("{abc}"); }), {"neither a range"});
  expect_contains(error_of([] { TarShardSource::expand_braces("{0..9999}{0..9999}"); }), {"more than 1000000"});
}

// ---- Python's tarfile: shards it writes read identically ----------------------------------------

int run(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

struct ManifestSample {
  std::string key;
  std::vector<std::pair<std::string, std::string>> members;  // extension, data
};

std::vector<ManifestSample> read_manifest(const std::string& path) {
  std::vector<ManifestSample> samples;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t tab1 = line.find('\t');
    const size_t tab2 = line.find('\t', tab1 + 1);
    const std::string key = line.substr(0, tab1);
    if (samples.empty() || samples.back().key != key) samples.push_back({key, {}});
    samples.back().members.emplace_back(line.substr(tab1 + 1, tab2 - tab1 - 1), from_hex(line.substr(tab2 + 1)));
  }
  return samples;
}

TEST(TarShardSource, ReadsShardsWrittenByPythonsTarfileIdentically) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is missing: no cross-check with Python's tarfile";
  const TempDir dir("ferry_tar_python");
  ASSERT_EQ(run({kPython, FERRY_SOURCE_DIR "/tests/io/formats/write_tar.py", dir.path()}), 0) << "write_tar.py failed";
  std::vector<std::string> shards;
  size_t total = 0;
  for (const char* format : {"ustar", "pax", "gnu"}) {
    SCOPED_TRACE(format);
    const std::string path = dir / (std::string(format) + ".tar");
    const std::vector<ManifestSample> expected = read_manifest(dir / (std::string(format) + ".manifest"));
    ASSERT_GT(expected.size(), 10u);
    const TarIndex index(path);
    ASSERT_EQ(index.sample_count(), expected.size());
    for (size_t s = 0; s < expected.size(); ++s) {
      EXPECT_EQ(index.key(s), expected[s].key);
      const auto members = index.members(s);
      ASSERT_EQ(members.size(), expected[s].members.size()) << expected[s].key;
      for (size_t m = 0; m < members.size(); ++m) {
        EXPECT_EQ(index.extension(members[m]), expected[s].members[m].first);
        std::string data(members[m].size, '\0');
        index.read(members[m], data.data());
        EXPECT_EQ(data, expected[s].members[m].second) << expected[s].key << "." << expected[s].members[m].first;
      }
    }
    shards.push_back(path);
    total += expected.size();
  }
  // The same through the source, with optional fields for the extensions only some samples have.
  const TarShardSource source(
      TarShardOptions{shards,
                      {TarField{"image", "jpg"}, TarField{"label", "cls", at::kLong, {}, std::nullopt, "label"},
                       TarField{"mask", "seg.png", at::kByte, {kVariableLength}, std::nullopt, "raw", true},
                       TarField{"meta", "json", at::kByte, {kVariableLength}, std::nullopt, "raw", true}}});
  ASSERT_EQ(source.size(), total);
  const LabelDecoder labels;
  for (uint64_t i = 0; i < source.size(); ++i) {
    const size_t shard = source.shard_of(i);
    const std::vector<ManifestSample> expected = read_manifest(dir / (std::string(shard == 0   ? "ustar"
                                                                                  : shard == 1 ? "pax"
                                                                                               : "gnu") +
                                                                      ".manifest"));
    const ManifestSample& want = expected[i - source.shard_samples(shard).begin];
    const EncodedSample sample = source.read(i);
    EXPECT_EQ(sample.key, shards[shard] + ":" + want.key);
    std::map<std::string, std::string> by_extension(want.members.begin(), want.members.end());
    EXPECT_EQ(bytes_of(sample.fields[0]), by_extension["jpg"]);
    EXPECT_EQ(labels.decode(sample.fields[1], source.fields()[1]).item<int64_t>(), std::stoll(by_extension["cls"]));
    // An optional field is followed by its flag; a member a sample lacks is absent (undefined).
    ASSERT_EQ(sample.fields.size(), 6u);
    EXPECT_EQ(source.fields()[3].name, "mask_present");
    EXPECT_EQ(source.fields()[5].name, "meta_present");
    for (const auto& [field, extension] : {std::pair<size_t, std::string>{2, "seg.png"}, {4, "json"}}) {
      const bool present = by_extension.count(extension) != 0;
      EXPECT_EQ(sample.fields[field + 1].item<bool>(), present) << extension;
      EXPECT_EQ(sample.fields[field].defined(), present) << extension;
      if (present) {
        EXPECT_EQ(bytes_of(sample.fields[field]), by_extension[extension]);
      }
    }
  }
}

TEST(TarShardSource, ReadsTheFirstOfAFieldsExtensionsThatASampleHas) {
  const TempDir dir("ferry_tar_alternatives");
  const std::string path = dir / "mixed.tar";
  {
    TarWriter writer;
    writer.add("a.jpg", "A-jpg");
    writer.add("b.png", "B-png");
    writer.add("c.webp", "C-webp");
    writer.add("c.jpg", "C-jpg");
    writer.add("d.txt", "D-txt");
    TarWriter::write_file(path, writer.finish());
  }
  const TarShardSource source(TarShardOptions{
      {path}, {TarField{.name = "image", .extension = "JPG", .optional = true, .alternatives = {".png", "webp"}}}});
  const std::vector<std::string> expected = {"A-jpg", "B-png", "C-jpg", ""};
  for (uint64_t i = 0; i < source.size(); ++i) {
    const EncodedSample sample = source.read(i);
    EXPECT_EQ(sample.fields[0].defined() ? bytes_of(sample.fields[0]) : "", expected[i]) << i;
    EXPECT_EQ(sample.fields[1].item<bool>(), !expected[i].empty()) << i;
    EXPECT_EQ(source.key(i), sample.key);
  }
  // Without optional, a sample with none of them is an error naming all of them.
  const TarShardSource required(
      TarShardOptions{{path}, {TarField{.name = "image", .extension = "jpg", .alternatives = {"png", "webp"}}}});
  const std::string message = error_of([&] { required.read(3); });
  expect_contains(message, {"has no '.jpg', '.png' or '.webp' member for field 'image'"});
}

// ---- the "label" decoder ----------------------------------------------------------------------------

at::Tensor text(const std::string& value) {
  at::Tensor out = at::empty({static_cast<int64_t>(value.size())}, at::kByte);
  if (!value.empty()) std::memcpy(out.data_ptr(), value.data(), value.size());
  return out;
}

TEST(LabelDecoder, ParsesAsciiIntegersWithSpaceAndSign) {
  const LabelDecoder decoder;
  const FieldSpec spec{"cls", at::kLong, {}, std::nullopt, "label"};
  const std::vector<std::pair<std::string, int64_t>> cases = {{"17\n", 17},
                                                              {"0", 0},
                                                              {" -3 \r\n", -3},
                                                              {"+5", 5},
                                                              {"\t9223372036854775807", INT64_MAX},
                                                              {"-9223372036854775808", INT64_MIN}};
  for (const auto& [input, value] : cases) {
    const at::Tensor label = decoder.decode(text(input), spec);
    EXPECT_EQ(label.scalar_type(), at::kLong);
    EXPECT_EQ(label.dim(), 0);
    EXPECT_EQ(label.item<int64_t>(), value) << input;
  }
  const at::Tensor narrow = decoder.decode(text("200"), FieldSpec{"cls", at::kByte, {1}, std::nullopt, "label"});
  EXPECT_EQ(narrow.sizes(), (std::vector<int64_t>{1}));
  EXPECT_EQ(narrow.item<uint8_t>(), 200);
  EXPECT_EQ(decoder.decode(text("-70000"), FieldSpec{"cls", at::kInt, {}, std::nullopt, "label"}).item<int32_t>(),
            -70000);
  EXPECT_EQ(DecoderRegistry().find("label")->name(), "label");
}

TEST(LabelDecoder, RejectsTextThatIsNotAnIntegerOfTheDeclaredType) {
  const LabelDecoder decoder;
  const FieldSpec spec{"cls", at::kLong, {}, std::nullopt, "label"};
  for (const std::string bad : {"x", "", "  ", "1.5", "+-1", "-", "12 3", "0x10", "99999999999999999999"}) {
    expect_contains(error_of([&] { decoder.decode(text(bad), spec); }), {"label '"});
  }
  expect_contains(error_of([&] { decoder.decode(text("x\n"), spec); }), {"'x\\x0a' is not a decimal integer"});
  expect_contains(error_of([&] {
                    decoder.decode(text("256"), FieldSpec{"c", at::kByte, {}, std::nullopt, "label"});
                  }),
                  {"'256' does not fit uint8"});
  expect_contains(error_of([&] {
                    decoder.decode(text("1"), FieldSpec{"c", at::kLong, {2}, std::nullopt, "label"});
                  }),
                  {"shape [] or [1]"});
  expect_contains(error_of([&] {
                    decoder.decode(text("1"), FieldSpec{"c", at::kFloat, {}, std::nullopt, "label"});
                  }),
                  {"not float32"});
  expect_contains(error_of([&] { decoder.decode(at::ones({1}, at::kLong), spec); }), {"1-D uint8"});
}

}  // namespace
}  // namespace ferry
