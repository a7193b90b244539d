#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/assembly/run_report.h>
#include <ferry/build_config.h>
#include <ferry/io/formats/synthetic_source.h>
#include <ferry/io/util/units.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/malloc_name.h>
#include <ferry/stages/standard_pipeline.h>

namespace ferry {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

// ---- a small JSON reader, so values are checked without Python --------------------------------

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;  // a string's value, or a number as written
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;  // in document order

  const Json& operator[](const std::string& key) const {
    if (type != Type::kObject) throw std::runtime_error("not an object, looking up " + key);
    for (const auto& [name, value] : members) {
      if (name == key) return value;
    }
    throw std::runtime_error("no key " + key);
  }
  const Json& operator[](size_t index) const { return items.at(index); }
  uint64_t u64() const {
    if (type != Type::kNumber || text.find_first_not_of("0123456789") != std::string::npos) {
      throw std::runtime_error("not an unsigned integer: " + text);
    }
    return std::stoull(text);
  }
  double number() const {
    if (type != Type::kNumber) throw std::runtime_error("not a number");
    return std::stod(text);
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> names;
    for (const auto& member : members) names.push_back(member.first);
    return names;
  }
};

// Strict enough for what JsonWriter writes: throws on anything malformed, trailing text included.
class JsonReader {
 public:
  static Json parse(const std::string& text) {
    JsonReader reader(text);
    Json value = reader.value();
    reader.space();
    if (reader.at_ != text.size()) reader.fail("trailing text");
    return value;
  }

 private:
  explicit JsonReader(const std::string& text) : text_(text) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(at_));
  }
  void space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t' || text_[at_] == '\r'))
      ++at_;
  }
  bool take(char c) {
    space();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }
  bool word(const char* literal) {
    const std::string w(literal);
    if (text_.compare(at_, w.size(), w) != 0) return false;
    at_ += w.size();
    return true;
  }

  Json value() {
    space();
    if (at_ >= text_.size()) fail("unexpected end");
    Json v;
    const char c = text_[at_];
    if (c == '{') {
      ++at_;
      v.type = Json::Type::kObject;
      if (take('}')) return v;
      do {
        space();
        std::string key = string();
        expect(':');
        v.members.emplace_back(std::move(key), value());
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      ++at_;
      v.type = Json::Type::kArray;
      if (take(']')) return v;
      do v.items.push_back(value());
      while (take(','));
      expect(']');
    } else if (c == '"') {
      v.type = Json::Type::kString;
      v.text = string();
    } else if (word("true")) {
      v.type = Json::Type::kBool;
      v.boolean = true;
    } else if (word("false")) {
      v.type = Json::Type::kBool;
    } else if (word("null")) {
      v.type = Json::Type::kNull;
    } else {
      const size_t start = at_;
      while (at_ < text_.size() && std::string("+-0123456789.eE").find(text_[at_]) != std::string::npos) ++at_;
      if (at_ == start) fail("unexpected character");
      v.type = Json::Type::kNumber;
      v.text = text_.substr(start, at_ - start);
      size_t used = 0;
      (void)std::stod(v.text, &used);
      if (used != v.text.size()) fail("bad number " + v.text);
    }
    return v;
  }

  std::string string() {
    if (at_ >= text_.size() || text_[at_] != '"') fail("expected a string");
    ++at_;
    std::string out;
    while (true) {
      if (at_ >= text_.size()) fail("unterminated string");
      const char c = text_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (at_ >= text_.size()) fail("unterminated escape");
      const char e = text_[at_++];
      switch (e) {
        case '"':
        case '\\':
        case '/': out.push_back(e); break;
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'u': {
          if (at_ + 4 > text_.size()) fail("short \\u escape");
          const unsigned code = static_cast<unsigned>(std::stoul(text_.substr(at_, 4), nullptr, 16));
          at_ += 4;
          // Basic plane only: all JsonWriter escapes (controls and U+FFFD).
          if (code < 0x80) {
            out.push_back(static_cast<char>(code));
          } else if (code < 0x800) {
            out.push_back(static_cast<char>(0xC0 | (code >> 6)));
            out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
          } else {
            out.push_back(static_cast<char>(0xE0 | (code >> 12)));
            out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
            out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
          }
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  const std::string& text_;
  size_t at_ = 0;
};

// ---- helpers ---------------------------------------------------------------------------------

SyntheticOptions small_dataset() {
  SyntheticOptions options;
  options.seed = 11;
  options.samples = 150;
  options.fields = {
      SyntheticField{"image", at::kByte, {3, 4, 4}, false, 0, 0, std::nullopt},
      SyntheticField{"label", at::kLong, {}, false, 0, 0, std::pair{0.0, 10.0}},
      SyntheticField{"tokens", at::kInt, {}, true, 0, 20, std::nullopt},
  };
  return options;
}

struct SmallRun {
  PipelineStats stats;
  RunInfo info;
};

// A real small pipeline, run to its end, as `ferry run` does.
SmallRun run_small_pipeline() {
  auto source = std::make_shared<const SyntheticSource>(small_dataset());
  PipelineOptions options;
  options.device = "cpu";
  options.batch_size = 16;
  options.decode_threads = 2;
  Pipeline pipeline = make_pipeline(source, options);
  for (const Batch& batch : pipeline) (void)batch;
  SmallRun run;
  run.stats = pipeline.stats();
  run.info.ferry_version = "0.1.0-test";
  run.info.config = "built-in demo";
  run.info.source = source->describe();
  run.info.device = "cpu";
  return run;
}

std::string json_of(const RunInfo& info, const PipelineStats& stats) {
  std::ostringstream out;
  write_report_json(out, info, stats);
  return out.str();
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// The schema validator's exit status for `document`, or -1 when it could not be run.
int check_schema(const std::string& document, const std::string& name) {
  const std::string path = write_temp(name, document);
  const std::string command = std::string(kPython) + " " + FERRY_SOURCE_DIR "/tests/assembly/check_json_schema.py " +
                              FERRY_SOURCE_DIR "/docs/report.schema.json " + path;
  const int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

bool have_python() { return ::access(kPython, X_OK) == 0; }

// Hand-made stats with everything a report can hold: skipped samples (more than listed, with
// strings that need escaping), pool waits, non-zero everything.
PipelineStats full_stats() {
  PipelineStats stats;
  stats.device = "cuda:0";
  stats.decode_threads = 4;
  stats.prefetch = 3;
  stats.elapsed_seconds = 2.0;
  stats.batches = 40;
  stats.first_batch_seconds = 0.5;
  stats.first_batch_samples = 32;
  stats.samples = 1280;
  stats.bytes = 3'000'000'000ull;
  stats.planner.name = "plan";
  stats.planner.in_unit = "samples";
  stats.planner.out_unit = "batches";
  stats.planner.items_in = 1280;
  stats.planner.items_out = 40;
  stats.planner.account_idle_time(2.0);
  for (const char* name : {"decode", "collate", "pack", "h2d", "event-wait"}) {
    StageStats stage;
    stage.name = name;
    stage.threads = stage.name == "decode" ? 4 : 1;
    stage.in_unit = stage.name == "decode" || stage.name == "collate" ? "samples" : "batches";
    stage.out_unit = stage.name == "decode" ? "samples" : "batches";
    stage.busy_seconds = stage.name == "decode" ? 7.9 : 0.2;
    stage.account_idle_time(2.0);
    stats.stages.push_back(stage);
  }
  stats.consumer_wait_seconds = 1.0;
  stats.consumer_waits = 30;
  stats.in_flight = OccupancyStats{2.5, 3, 3};
  stats.ready_queue = OccupancyStats{0.25, 1, 3};
  stats.pool.slab_count = 3;
  stats.pool.slab_bytes = 1 << 20;
  stats.pool.waits = 2;
  stats.pool.wait_seconds = 0.01;
  stats.cache.enabled = true;
  stats.cache.memory = "managed";
  stats.cache.location = "host";
  stats.cache.capacity_bytes = 1 << 24;
  stats.cache.used_bytes = 3 << 20;
  stats.cache.samples = 120;
  stats.cache.hits = 300;
  stats.cache.misses = 150;
  stats.cache.hit_epochs = 2;
  stats.cache.gathers = 20;
  stats.cache.timed_gathers = 20;
  stats.cache.gather_seconds = 0.0004;
  stats.cache.moves = 2;
  stats.cache.last_move_seconds = 0.003;
  stats.batch_path.batches = 40;
  for (const char* leg :
       {"plan to collated", "to pack", "pack", "to h2d", "h2d", "to event-wait", "event-wait", "to consumer"}) {
    stats.batch_path.legs.push_back(BatchPathStats::Leg{leg, std::string(leg).rfind("to ", 0) == 0, 0.004});
  }
  stats.skipped_samples = 105;
  stats.skipped.push_back(SkippedSample{7, "shard-0/\"odd\"\\name\n", "decode", "bad header\t(\x01)"});
  stats.skipped.push_back(SkippedSample{9, "", "decode", "not UTF-8: \xff"});
  return stats;
}

// ---- tests -----------------------------------------------------------------------------------

TEST(RunReport, TextNamesTheBottleneckAndShowsThePoolLine) {
  const SmallRun run = run_small_pipeline();
  const std::string text = report_text("ferry run: test", run.info, run.stats);
  EXPECT_EQ(text.rfind("ferry run: test\n", 0), 0u) << text;
  EXPECT_NE(text.find("  config     built-in demo\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  delivered  10 batches, 150 samples, "), std::string::npos) << text;
  EXPECT_NE(text.find("  bottleneck " + bottleneck_summary(run.stats) + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  per batch  " + per_batch_summary(run.stats) + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  batch path " + batch_path_summary(run.stats) + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("0 allocations after start-up"), std::string::npos) << text;
  EXPECT_NE(text.find("0 waits for a slab"), std::string::npos) << text;
  // Note [placing samples]: the leading fixed-size fields (image, label) went straight into the slabs;
  // the variable-length tokens were packed.
  EXPECT_EQ(run.stats.placed_bytes, 150u * (3 * 4 * 4 + sizeof(int64_t)));
  EXPECT_NE(text.find("             " + format_decimal_bytes(static_cast<double>(run.stats.placed_bytes)) +
                      " placed in the slabs by decode ("),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  skipped    none\n"), std::string::npos) << text;
  for (const char* stage : {"plan", "decode", "collate", "pack", "h2d", "event-wait"}) {
    EXPECT_NE(text.find("\n  " + std::string(stage) + " "), std::string::npos) << stage << " row missing\n" << text;
  }
  EXPECT_NE(text.find("150 samples     10 batches"), std::string::npos) << "collate: samples in, batches out\n" << text;
  // The overload without RunInfo (what cli/main.cpp calls) says the same about the run.
  EXPECT_NE(report_text("t", run.stats).find("  bottleneck " + bottleneck_summary(run.stats)), std::string::npos);
}

TEST(RunReport, TextListsSkippedSamplesAndCountsTheRest) {
  const std::string text = report_text("t", full_stats());
  EXPECT_NE(text.find("  skipped    105 samples:\n"), std::string::npos) << text;
  EXPECT_NE(text.find("    sample 9 in decode: not UTF-8"), std::string::npos) << text;
  EXPECT_NE(text.find("    ... and 103 more\n"), std::string::npos) << text;
  EXPECT_NE(text.find("2 waits for a slab (0.010 s)"), std::string::npos) << text;
}

TEST(RunReport, JsonHoldsTheStatsInTheDocumentedOrder) {
  const SmallRun run = run_small_pipeline();
  const PipelineStats& stats = run.stats;
  const Json json = JsonReader::parse(json_of(run.info, stats));

  EXPECT_EQ(json.keys(),
            (std::vector<std::string>{"format", "format_version", "ferry_version", "run", "host", "config", "settings",
                                      "totals", "devices", "bottleneck", "per_batch", "batch_path", "planner", "stages",
                                      "consumer", "queues", "pool", "skipped"}));
  EXPECT_EQ(json["format"].text, "ferry-run-report");
  EXPECT_EQ(json["format_version"].u64(), static_cast<uint64_t>(kReportFormatVersion));
  EXPECT_EQ(json["ferry_version"].text, "0.1.0-test");
  EXPECT_EQ(json["run"]["config"].text, "built-in demo");
  EXPECT_EQ(json["run"]["source"].text, run.info.source);
  EXPECT_EQ(json["run"]["device"].text, stats.device);
  EXPECT_FALSE(json["run"]["interrupted"].boolean);
  EXPECT_EQ(json["run"]["exit_status"].u64(), 0u);
  EXPECT_EQ(json["run"]["error"].text, "");

  EXPECT_EQ(json["totals"]["batches"].u64(), stats.batches);
  EXPECT_EQ(json["totals"]["samples"].u64(), stats.samples);
  EXPECT_EQ(json["totals"]["bytes"].u64(), stats.bytes);
  EXPECT_EQ(stats.batches, 10u);
  EXPECT_EQ(stats.samples, 150u);
  EXPECT_DOUBLE_EQ(json["totals"]["wall_seconds"].number(), stats.elapsed_seconds);
  EXPECT_DOUBLE_EQ(json["totals"]["samples_per_second"].number(),
                   static_cast<double>(stats.samples) / stats.elapsed_seconds);
  EXPECT_EQ(json["bottleneck"].text, bottleneck_summary(stats));
  EXPECT_EQ(json["per_batch"].text, per_batch_summary(stats));
  EXPECT_DOUBLE_EQ(json["totals"]["seconds_per_batch"].number(), stats.elapsed_seconds / 10.0);
  EXPECT_DOUBLE_EQ(json["totals"]["batch_latency_seconds"].number(), stats.batch_latency_seconds());
  EXPECT_GT(stats.first_batch_seconds, 0.0);
  EXPECT_DOUBLE_EQ(json["totals"]["first_batch_seconds"].number(), stats.first_batch_seconds);
  EXPECT_DOUBLE_EQ(json["totals"]["samples_per_second_after_first_batch"].number(),
                   stats.samples_per_second_after_first_batch());
  EXPECT_EQ(json["settings"]["decode_threads"].u64(), 2u);

  // Note [batch path]: every batch timed, its eight legs in order, as the stats hold them.
  const Json& path = json["batch_path"];
  EXPECT_EQ(path["batches"].u64(), stats.batches);
  EXPECT_DOUBLE_EQ(path["latency_seconds"].number(), stats.batch_path.latency_seconds());
  EXPECT_GT(stats.batch_path.latency_seconds(), 0.0);
  const std::vector<std::string> legs{"plan to collated", "to pack",    "pack",       "to h2d", "h2d",
                                      "to event-wait",    "event-wait", "to consumer"};
  ASSERT_EQ(path["legs"].items.size(), legs.size());
  for (size_t i = 0; i < legs.size(); ++i) {
    const Json& leg = path["legs"][i];
    EXPECT_EQ(leg["name"].text, legs[i]);
    EXPECT_EQ(leg["waiting"].boolean, legs[i].rfind("to ", 0) == 0) << legs[i];
    EXPECT_DOUBLE_EQ(leg["seconds"].number(), stats.batch_path.legs[i].seconds);
    EXPECT_DOUBLE_EQ(leg["seconds_per_batch"].number(), stats.batch_path.legs[i].seconds / 10.0);
  }

  const Json& planner = json["planner"];
  EXPECT_EQ(planner["name"].text, "plan");
  EXPECT_EQ(planner["items_out"].u64(), stats.batches);
  EXPECT_EQ(planner["items_in"].u64(), stats.samples);

  const Json& stages = json["stages"];
  ASSERT_EQ(stages.items.size(), stats.stages.size());
  for (size_t i = 0; i < stages.items.size(); ++i) {
    const Json& stage = stages[i];
    SCOPED_TRACE(stage["name"].text);
    EXPECT_EQ(stage["name"].text, stats.stages[i].name);
    EXPECT_LE(stage["items_out"].u64(), stage["items_in"].u64());
    EXPECT_EQ(stage["items_in"].u64(), stats.stages[i].items_in);
    EXPECT_EQ(stage["items_out"].u64(), stats.stages[i].items_out);
    EXPECT_DOUBLE_EQ(stage["busy_seconds"].number(), stats.stages[i].busy_seconds);
    EXPECT_DOUBLE_EQ(stage["busy_share"].number(), stats.stages[i].busy_share());
    EXPECT_DOUBLE_EQ(stage["busy_per_batch_seconds"].number(), stats.stages[i].busy_seconds / 10.0);
  }
  EXPECT_EQ(stages[1]["name"].text, "collate");
  EXPECT_EQ(stages[1]["items_out"].u64(), stats.batches) << "collate makes every batch of a full run";
  EXPECT_EQ(stages[1]["items_in"].u64(), stats.samples);
  EXPECT_EQ(stages[4]["items_out"].u64(), stats.batches) << "event-wait hands on every batch";

  EXPECT_EQ(json["consumer"]["batches"].u64(), stats.batches);
  EXPECT_DOUBLE_EQ(json["consumer"]["wait_seconds"].number(), stats.consumer_wait_seconds);
  EXPECT_EQ(json["queues"]["in_flight"]["capacity"].u64(), stats.prefetch);
  EXPECT_EQ(json["queues"]["ready"]["peak"].u64(), stats.ready_queue.peak);
  EXPECT_EQ(json["pool"]["allocations_after_start"].u64(), 0u);
  EXPECT_EQ(json["pool"]["placed_bytes"].u64(), stats.placed_bytes);
  EXPECT_EQ(json["pool"]["leases"].u64(), stats.batches);
  EXPECT_EQ(json["pool"]["peak_bytes"].u64(), stats.pool.peak_bytes);
  EXPECT_EQ(json["skipped"]["count"].u64(), 0u);
  EXPECT_TRUE(json["skipped"]["listed"].items.empty());
  EXPECT_EQ(json["skipped"]["not_listed"].u64(), 0u);
}

TEST(RunReport, TheCacheHasALineAndAnObjectOnlyWhenThereIsOne) {
  const PipelineStats stats = full_stats();
  const Json json = JsonReader::parse(json_of(RunInfo{}, stats));
  const Json& cache = json["cache"];
  EXPECT_EQ(cache["memory"].text, "managed");
  EXPECT_EQ(cache["location"].text, "host");
  EXPECT_EQ(cache["used_bytes"].u64(), 3u << 20);
  EXPECT_EQ(cache["hits"].u64(), 300u);
  EXPECT_EQ(cache["hit_epochs"].u64(), 2u);
  EXPECT_DOUBLE_EQ(cache["gather_seconds_per_batch"].number(), 0.0004 / 20);
  EXPECT_EQ(cache["moves"].u64(), 2u);
  const std::string text = report_text("t", RunInfo{}, stats);
  EXPECT_NE(text.find("cache      managed memory on host"), std::string::npos) << text;
  EXPECT_NE(text.find("300 hits, 150 misses, 2 epochs served wholly from it; gather 20.0 us per batch"),
            std::string::npos)
      << text;

  PipelineStats none = stats;
  none.cache = DatasetCacheStats{};
  EXPECT_EQ(json_of(RunInfo{}, none).find("\"cache\""), std::string::npos);
  EXPECT_EQ(report_text("t", RunInfo{}, none).find("cache "), std::string::npos);
}

TEST(RunReport, UserCodeHasALineAndAnEntryEachOnlyWhenThereIsSome) {
  PipelineStats stats = full_stats();
  stats.elapsed_seconds = 4.0;
  stats.decode_threads = 4;
  UserCodeStats dataset;
  dataset.what = "python dataset 'pkg.data:make'";
  dataset.processes = 2;
  dataset.calls = 6400;
  dataset.requests = 200;
  dataset.busy_seconds = 6.0;
  dataset.replaced = 1;
  UserCodeStats transform;
  transform.what = "python transform 'pkg.data:crop'";
  transform.calls = 6400;
  transform.busy_seconds = 2.2;
  stats.user_code = {dataset, transform};
  const std::string report = json_of(RunInfo{}, stats);
  const Json json = JsonReader::parse(report);
  const Json& code = json["user_code"];
  ASSERT_EQ(code.items.size(), 2u);
  EXPECT_EQ(code[0]["what"].text, "python dataset 'pkg.data:make'");
  EXPECT_EQ(code[0]["processes"].u64(), 2u);
  EXPECT_EQ(code[0]["calls"].u64(), 6400u);
  EXPECT_EQ(code[0]["requests"].u64(), 200u);
  EXPECT_DOUBLE_EQ(code[0]["busy_seconds"].number(), 6.0);
  EXPECT_DOUBLE_EQ(code[0]["busy_share"].number(), 0.75);  // 6 s of 2 processes x 4 s
  EXPECT_EQ(code[0]["replaced"].u64(), 1u);
  EXPECT_EQ(code[1]["processes"].u64(), 0u);
  EXPECT_NEAR(code[1]["busy_share"].number(), 0.1375, 1e-9);  // 2.2 s of 4 decode threads x 4 s
  EXPECT_EQ(check_schema(report, "report_user_code.json"), 0);
  const std::string text = report_text("t", RunInfo{}, stats);
  EXPECT_NE(text.find("user code  python dataset 'pkg.data:make' on 2 worker processes: 6400 samples in 200 "
                      "requests, busy 6.000 s (75%), 1 worker replaced\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("user code  python transform 'pkg.data:crop' on the decode threads: 6400 samples, busy "
                      "2.200 s (14%)\n"),
            std::string::npos)
      << text;

  stats.user_code.clear();
  EXPECT_EQ(json_of(RunInfo{}, stats).find("\"user_code\""), std::string::npos);
  EXPECT_EQ(report_text("t", RunInfo{}, stats).find("user code"), std::string::npos);
}

TEST(RunReport, AMixtureGivesEachPartsSamplesAndShareBesideItsWeight) {
  PipelineStats stats = full_stats();
  stats.source_parts = {{"tokens(a.bin, 1000 windows)", 0.7, 720}, {"megatron(b, 500 sequences)", 0.3, 280}};
  const std::string report = json_of(RunInfo{}, stats);
  const Json json = JsonReader::parse(report);
  const Json& parts = json["source_parts"];
  ASSERT_EQ(parts.items.size(), 2u);
  EXPECT_EQ(parts[0]["source"].text, "tokens(a.bin, 1000 windows)");
  EXPECT_DOUBLE_EQ(parts[0]["weight"].number(), 0.7);
  EXPECT_EQ(parts[0]["samples"].u64(), 720u);
  EXPECT_DOUBLE_EQ(parts[0]["share"].number(), 0.72);
  EXPECT_DOUBLE_EQ(parts[1]["share"].number(), 0.28);
  EXPECT_EQ(check_schema(report, "report_source_parts.json"), 0);
  const std::string text = report_text("t", RunInfo{}, stats);
  EXPECT_NE(text.find("mixture    tokens(a.bin, 1000 windows): 720 samples, 72.0% (weight 70.0%)\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("mixture    megatron(b, 500 sequences): 280 samples, 28.0% (weight 30.0%)\n"), std::string::npos)
      << text;

  // A group's devices add up; nothing yet is a share of 0, not a division by zero.
  PipelineStats other = stats;
  other.source_parts[0].samples = 80;
  other.source_parts[1].samples = 120;
  const PipelineStats merged = merged_stats({stats, other});
  ASSERT_EQ(merged.source_parts.size(), 2u);
  EXPECT_EQ(merged.source_parts[0].samples, 800u);
  EXPECT_EQ(merged.source_parts[1].samples, 400u);
  for (SourcePartStats& part : stats.source_parts) part.samples = 0;
  EXPECT_DOUBLE_EQ(JsonReader::parse(json_of(RunInfo{}, stats))["source_parts"][0]["share"].number(), 0.0);

  stats.source_parts.clear();
  EXPECT_EQ(json_of(RunInfo{}, stats).find("\"source_parts\""), std::string::npos);
  EXPECT_EQ(report_text("t", RunInfo{}, stats).find("mixture"), std::string::npos);
}

TEST(RunReport, GpuDecodingHasLinesAndAnObjectOnlyWhenAJpegFieldUsesTheGpu) {
  PipelineStats stats = full_stats();
  stats.elapsed_seconds = 4.0;
  stats.gpu_decode.enabled = true;
  stats.gpu_decode.gpu_images = 750;
  stats.gpu_decode.cpu_images = 250;
  stats.gpu_decode.gpu_group_seconds = 6.5;
  stats.gpu_decode.ready_seconds = 1.25;
  stats.gpu_decode.busy_seconds = 3.0;
  stats.gpu_decode.states = 4;
  stats.gpu_decode.state_busy_seconds = 8.0;
  const Json json = JsonReader::parse(json_of(RunInfo{}, stats));
  const Json& gpu = json["gpu_decode"];
  EXPECT_EQ(gpu["gpu_images"].u64(), 750u);
  EXPECT_EQ(gpu["cpu_images"].u64(), 250u);
  EXPECT_DOUBLE_EQ(gpu["gpu_group_seconds"].number(), 6.5);
  EXPECT_DOUBLE_EQ(gpu["ready_seconds"].number(), 1.25);
  EXPECT_DOUBLE_EQ(gpu["busy_seconds"].number(), 3.0);
  EXPECT_EQ(gpu["decoding_states"].u64(), 4u);
  EXPECT_DOUBLE_EQ(gpu["state_busy_seconds"].number(), 8.0);
  EXPECT_EQ(gpu["unavailable"].text, "");
  EXPECT_EQ(gpu["auto_choice"].text, "") << "under gpu";
  EXPECT_EQ(check_schema(json_of(RunInfo{}, stats), "report_gpu_decode.json"), 0);
  std::string text = report_text("t", RunInfo{}, stats);
  EXPECT_NE(text.find("jpeg       750 images on the GPU (75%), 250 images on the CPU"), std::string::npos) << text;
  EXPECT_NE(text.find("the GPU decoder was ready after 1.250 s and busy 3.000 s (75% of the run); its 4 decoding "
                      "states in use 50% of the time"),
            std::string::npos)
      << text;

  // Under auto: what it chose, from which rates; each phase in the JSON and the text.
  stats.gpu_decode.auto_cpu_images_per_second = 31'000.0;
  stats.gpu_decode.auto_gpu_images_per_second = 55'100.0;
  const std::vector<std::pair<std::string, std::string>> phases = {
      {"gpu", "auto chose the GPU: the GPU alone 55.1k images/s, the CPU threads 31.0k images/s while it started"},
      {"cpu", "auto chose the CPU threads: the GPU alone 55.1k images/s, the CPU threads 31.0k images/s while it"},
      {"trying", "auto: the GPU decodes while its rate is measured (the CPU threads: 31.0k images/s)"},
      {"warming", "auto: the CPU threads decode while the GPU decoder starts"},
      {"mixed",
       "auto: the devices chose differently (in all: the GPU 55.1k images/s, the CPU threads 31.0k images/s)"}};
  for (const auto& [phase, line] : phases) {
    stats.gpu_decode.auto_choice = phase;
    EXPECT_NE(report_text("t", RunInfo{}, stats).find(line), std::string::npos) << phase;
    const std::string report = json_of(RunInfo{}, stats);
    const Json parsed = JsonReader::parse(report);
    const Json& chosen = parsed["gpu_decode"];
    EXPECT_EQ(chosen["auto_choice"].text, phase);
    EXPECT_DOUBLE_EQ(chosen["auto_cpu_images_per_second"].number(), 31'000.0);
    EXPECT_DOUBLE_EQ(chosen["auto_gpu_images_per_second"].number(), 55'100.0);
    EXPECT_EQ(check_schema(report, "report_auto_" + phase + ".json"), 0) << phase;
  }
  stats.gpu_decode.auto_gpu_images_per_second = 0.0;
  stats.gpu_decode.auto_choice = "trying";
  EXPECT_EQ(check_schema(json_of(RunInfo{}, stats), "report_auto_unmeasured.json"), 0);
  stats.gpu_decode.auto_choice = "cpu";
  EXPECT_NE(report_text("t", RunInfo{}, stats).find("the GPU alone not measured, the CPU threads 31.0k"),
            std::string::npos);

  // Under auto, a decoder still starting, and one that failed to start, say so.
  stats.gpu_decode.ready_seconds = 0.0;
  stats.gpu_decode.busy_seconds = 0.0;
  EXPECT_NE(report_text("t", RunInfo{}, stats).find("the GPU decoder was still starting"), std::string::npos);
  stats.gpu_decode.unavailable = "no hardware JPEG decoder on cuda:0";
  text = report_text("t", RunInfo{}, stats);
  EXPECT_NE(text.find("the GPU decoder did not start: no hardware JPEG decoder on cuda:0"), std::string::npos) << text;
  EXPECT_EQ(JsonReader::parse(json_of(RunInfo{}, stats))["gpu_decode"]["unavailable"].text,
            "no hardware JPEG decoder on cuda:0");

  stats.gpu_decode = PipelineStats::GpuDecodeStats{};
  EXPECT_EQ(json_of(RunInfo{}, stats).find("\"gpu_decode\""), std::string::npos);
  EXPECT_EQ(report_text("t", RunInfo{}, stats).find("jpeg  "), std::string::npos);
}

// transfer.devices: each device's share in `devices` and a line of the text; the rest is the merged run.
TEST(RunReport, AGroupsDevicesHaveAnObjectAndALineEach) {
  std::vector<PipelineStats> devices(2, full_stats());
  devices[0].device = "cuda:0";
  devices[1].device = "cuda:1";
  devices[1].bytes = 3 * devices[0].bytes;
  for (PipelineStats& device : devices) {
    for (StageStats& stage : device.stages) {
      if (stage.name == "event-wait") stage.busy_seconds = 0.5;
      if (stage.name == "h2d") stage.busy_seconds = 0.25;
    }
  }
  RunInfo info;
  info.devices = devices;
  const PipelineStats all = merged_stats(devices);
  EXPECT_EQ(all.device, "cuda:0, cuda:1");
  EXPECT_EQ(all.batches, 2 * devices[0].batches);
  EXPECT_EQ(all.bytes, 4 * devices[0].bytes);
  const Json json = JsonReader::parse(json_of(info, all));
  ASSERT_EQ(json["devices"].items.size(), 2u);
  const Json& second = json["devices"].items[1];
  EXPECT_EQ(second["device"].text, "cuda:1");
  EXPECT_EQ(second["batches"].u64(), devices[1].batches);
  EXPECT_EQ(second["bytes"].u64(), devices[1].bytes);
  EXPECT_DOUBLE_EQ(second["gigabytes_per_second"].number(),
                   static_cast<double>(devices[1].bytes) / devices[1].elapsed_seconds / 1e9);
  EXPECT_DOUBLE_EQ(second["h2d_busy_seconds"].number(), 0.25);
  EXPECT_DOUBLE_EQ(second["copy_wait_seconds"].number(), 0.5);
  if (have_python()) {
    EXPECT_EQ(check_schema(json_of(info, all), "report_devices.json"), 0);
  }
  const std::string text = report_text("t", info, all);
  EXPECT_NE(text.find("  device     cuda:1: " + std::to_string(devices[1].batches) + " batches"), std::string::npos)
      << text;
  EXPECT_TRUE(JsonReader::parse(json_of(RunInfo{}, devices[0]))["devices"].items.empty());
}

// A run a signal stopped before its pipeline was made (Note [a signal while starting] in cli/main.cpp):
// the text says so instead of tables of zeros; the JSON is an ordinary report of nothing delivered.
TEST(RunReport, ARunStoppedWhileStartingSaysSoInsteadOfEmptyTables) {
  RunInfo info;
  info.config = "run.yaml";
  info.source = "synthetic(seed=1, samples=8, fields=1)";
  info.interrupted = true;
  info.started = false;
  info.exit_status = 130;
  const PipelineStats nothing = merged_stats({});
  const std::string text = report_text("ferry run: run.yaml", info, nothing);
  EXPECT_EQ(text,
            "ferry run: run.yaml\n  config     run.yaml\n  source     synthetic(seed=1, samples=8, fields=1)\n"
            "  stopped    interrupted while starting: no batch was delivered\n");
  const Json json = JsonReader::parse(json_of(info, nothing));
  EXPECT_TRUE(json["run"]["interrupted"].boolean);
  EXPECT_EQ(json["totals"]["batches"].u64(), 0u);
  if (have_python()) {
    EXPECT_EQ(check_schema(json_of(info, nothing), "report_unstarted.json"), 0);
  }
}

TEST(RunReport, JsonEscapesStringsAndCountsUnlistedSkips) {
  RunInfo info;
  info.ferry_version = "0.1.0";
  info.config = "/data/\"quoted\" dir\\config.yaml";
  info.source = "tab\there";
  info.interrupted = true;
  info.exit_status = 130;
  const Json json = JsonReader::parse(json_of(info, full_stats()));
  EXPECT_EQ(json["run"]["config"].text, info.config);
  EXPECT_EQ(json["run"]["source"].text, info.source);
  EXPECT_TRUE(json["run"]["interrupted"].boolean);
  EXPECT_EQ(json["run"]["exit_status"].u64(), 130u);
  EXPECT_EQ(json["run"]["device_requested"].text, "cuda:0") << "no device asked for: the resolved one";

  info.exit_status = 1;
  info.error = "ferry: decode failed on sample 7 (epoch 0, batch 1): \"x.jpg\": bad marker";
  const Json failed = JsonReader::parse(json_of(info, full_stats()));
  EXPECT_EQ(failed["run"]["error"].text, info.error);
  EXPECT_NE(report_text("ferry run", info, full_stats()).find("  failed     " + info.error), std::string::npos);
  const Json& skipped = json["skipped"];
  EXPECT_EQ(skipped["count"].u64(), 105u);
  ASSERT_EQ(skipped["listed"].items.size(), 2u);
  EXPECT_EQ(skipped["listed"][0]["key"].text, "shard-0/\"odd\"\\name\n");
  EXPECT_EQ(skipped["listed"][0]["reason"].text, "bad header\t(\x01)");
  EXPECT_EQ(skipped["listed"][1]["reason"].text, "not UTF-8: \xef\xbf\xbd") << "an invalid byte becomes U+FFFD";
  EXPECT_EQ(skipped["not_listed"].u64(), 103u);
  EXPECT_EQ(json["totals"]["bytes"].u64(), 3'000'000'000ull);
  EXPECT_DOUBLE_EQ(json["totals"]["gigabytes_per_second"].number(), 1.5);
}

TEST(RunReport, JsonOfAnEmptySnapshotHasNoNaN) {
  PipelineStats empty;  // before anything ran: zero time, zero batches
  const std::string text = json_of(RunInfo{}, empty);
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
  EXPECT_EQ(text.find("inf"), std::string::npos) << text;
  EXPECT_EQ(text.find("null"), std::string::npos) << "every number finite\n" << text;
  const Json json = JsonReader::parse(text);
  EXPECT_EQ(json["totals"]["samples_per_second"].number(), 0.0);
  EXPECT_EQ(json["consumer"]["wait_per_batch_seconds"].number(), 0.0);
}

TEST(RunReport, JsonNamesTheHostTheDeviceAndTheConfigAsItRan) {
  RunInfo info;
  info.host = this_host();
  // A device number past the machine's own (on a machine with two GPUs, cuda:1 is a real one).
  const int index = static_cast<int>(info.host.devices.size()) + 7;
  const std::string device = "cuda:" + std::to_string(index);
  info.host.devices.push_back(HostInfo::Device{index, "Test GPU \"X\"", 80ull << 30});
  info.config_keys = {{"batch_size", "64"}, {"source.fields[0].dtype", "float32"}, {"transfer.device", device}};
  PipelineStats stats = full_stats();
  stats.device = device;
  const Json json = JsonReader::parse(json_of(info, stats));
  EXPECT_EQ(json["run"]["device_name"].text, "Test GPU \"X\"");
  EXPECT_EQ(json["host"]["name"].text, info.host.name);
  EXPECT_FALSE(info.host.name.empty());
  EXPECT_EQ(json["host"]["cpus"].u64(), info.host.cpus);
  EXPECT_EQ(json["host"]["libtorch"].text, FERRY_TORCH_VERSION);
  EXPECT_EQ(json["host"]["build"].text, build_description());
  EXPECT_EQ(json["host"]["malloc"].text, malloc_name());
  const Json& devices = json["host"]["devices"];
  ASSERT_EQ(devices.items.size(), info.host.devices.size());
  EXPECT_EQ(devices[devices.items.size() - 1]["memory_bytes"].u64(), 80ull << 30);
  EXPECT_EQ(json["config"].keys(),
            (std::vector<std::string>{"batch_size", "source.fields[0].dtype", "transfer.device"}));
  EXPECT_EQ(json["config"]["source.fields[0].dtype"].text, "float32");
  stats.device = "cpu";
  EXPECT_EQ(JsonReader::parse(json_of(info, stats))["run"]["device_name"].text, "cpu");
  if (have_python()) {
    EXPECT_EQ(check_schema(json_of(info, stats), "report_host.json"), 0);
  }
}

TEST(RunReport, JsonMatchesTheDocumentedSchema) {
  if (!have_python()) GTEST_SKIP() << kPython << " not found: the schema check needs a Python interpreter";
  const SmallRun run = run_small_pipeline();
  EXPECT_EQ(check_schema(json_of(run.info, run.stats), "report_real.json"), 0) << "a real run's report";
  RunInfo info;
  info.config = "c\"\\\n";
  EXPECT_EQ(check_schema(json_of(info, full_stats()), "report_full.json"), 0) << "skips and odd strings";
  EXPECT_EQ(check_schema(json_of(RunInfo{}, PipelineStats{}), "report_empty.json"), 0) << "an empty snapshot";
}

// The validator is only worth its pass if it fails: a missing key, an extra key, a wrong type, a
// negative count, NaN and a malformed document are each caught.
TEST(RunReport, TheSchemaCheckRejectsBrokenReports) {
  if (!have_python()) GTEST_SKIP() << kPython << " not found: the schema check needs a Python interpreter";
  const std::string good = json_of(RunInfo{}, full_stats());
  ASSERT_EQ(check_schema(good, "good.json"), 0);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  };
  const std::string version = "\"format_version\": " + std::to_string(kReportFormatVersion) + ",";
  EXPECT_EQ(check_schema(replaced(version, ""), "missing.json"), 1);
  EXPECT_EQ(check_schema(replaced(version, version + " \"extra\": 2,"), "extra.json"), 1);
  EXPECT_EQ(check_schema(replaced("\"waiting\": true", "\"waiting\": 1"), "leg.json"), 1);
  EXPECT_EQ(check_schema(replaced("\"batches\": 40", "\"batches\": \"40\""), "type.json"), 1);
  EXPECT_EQ(check_schema(replaced("\"batches\": 40", "\"batches\": -40"), "negative.json"), 1);
  EXPECT_EQ(check_schema(replaced("\"wall_seconds\": 2", "\"wall_seconds\": NaN"), "nan.json"), 1);
  EXPECT_EQ(check_schema(replaced("\"in_unit\": \"samples\"", "\"in_unit\": \"bytes\""), "enum.json"), 1);
  EXPECT_EQ(check_schema(good.substr(0, good.size() / 2), "truncated.json"), 1);
}

}  // namespace
}  // namespace ferry
