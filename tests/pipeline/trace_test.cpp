// stats.trace: the run as a Chrome trace-event file. Checked as a viewer would read it (valid JSON, an
// array of events) and against the run's own report: every delivered batch has a span in every stage,
// the spans count what the stats count, the counters never pass their bounds and reach the report's
// peaks, every skipped sample is an instant event, and a group's devices are one track each.
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <simdjson.h>

#include <ferry/assembly/config_error.h>
#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/pipeline/pipeline_group.h>
#include <ferry/pipeline/trace.h>
#include <ferry/stages/standard_pipeline.h>
#include "tests/support/instrumented_source.h"
#include "tests/support/reference_batch.h"
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

struct Event {
  std::string ph;
  std::string name;
  int64_t pid = 0;
  int64_t tid = 0;
  double ts = 0.0;
  double dur = 0.0;
  uint64_t epoch = 0;
  uint64_t batch = 0;
  uint64_t samples = 0;
  uint64_t value = 0;    // a counter's
  std::string key;       // a skipped sample's
  std::string arg_name;  // metadata: the name given
};

// Every event of the file, as a viewer reads them; fails the test where the file is not a JSON array of
// events.
std::vector<Event> read_trace(const std::string& path) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  const auto error = parser.load(path).get(doc);
  EXPECT_EQ(error, simdjson::SUCCESS) << path << ": " << simdjson::error_message(error);
  std::vector<Event> events;
  if (error) return events;
  simdjson::dom::array array;
  EXPECT_EQ(doc.get_array().get(array), simdjson::SUCCESS) << "the trace is not an array";
  for (simdjson::dom::element element : array) {
    Event event;
    event.ph = std::string(std::string_view(element["ph"]));
    event.name = std::string(std::string_view(element["name"]));
    event.pid = int64_t(element["pid"]);
    if (element["tid"].error() == simdjson::SUCCESS) event.tid = int64_t(element["tid"]);
    if (event.ph == "M") {
      if (element["args"]["name"].error() == simdjson::SUCCESS) {
        event.arg_name = std::string(std::string_view(element["args"]["name"]));
      }
      events.push_back(std::move(event));
      continue;
    }
    event.ts = double(element["ts"]);
    simdjson::dom::object args = element["args"];
    if (event.ph == "X") {
      event.dur = double(element["dur"]);
      event.epoch = uint64_t(args["epoch"]);
      event.batch = uint64_t(args["batch"]);
      if (args["samples"].error() == simdjson::SUCCESS) event.samples = uint64_t(args["samples"]);
    } else if (event.ph == "C") {
      for (auto field : args) event.value = uint64_t(field.value);
    } else if (event.ph == "i") {
      event.batch = uint64_t(args["index"]);
      event.key = std::string(std::string_view(args["key"]));
    }
    events.push_back(std::move(event));
  }
  return events;
}

std::vector<Event> of(const std::vector<Event>& events, const std::string& ph, const std::string& name,
                      int64_t pid = 0) {
  std::vector<Event> found;
  for (const Event& e : events) {
    if (e.ph == ph && e.name == name && e.pid == pid) found.push_back(e);
  }
  return found;
}

uint64_t max_value(const std::vector<Event>& counters) {
  uint64_t most = 0;
  for (const Event& e : counters) most = std::max(most, e.value);
  return most;
}

const StageStats& stage(const PipelineStats& stats, const std::string& name) {
  for (const StageStats& s : stats.stages) {
    if (s.name == name) return s;
  }
  throw std::invalid_argument(name);
}

SyntheticOptions dataset(uint64_t samples, uint64_t seed) {
  SyntheticOptions options;
  options.seed = seed;
  options.samples = samples;
  options.fields = {
      SyntheticField{"image", at::kByte, {3, 5, 4}, false, 0, 0, std::nullopt},
      SyntheticField{"tokens", at::kInt, {}, true, 1, 40, std::nullopt},
  };
  return options;
}

// The checks every traced run passes: `batches` (epoch, index) were delivered by the pipeline whose stats
// are `stats`, on track `pid`. `whole`: the pipeline's run was the whole of its work; in a group, a
// device may still be finishing batches past the step where the group ended, which the report counts
// and the trace, ended, leaves out.
void check_track(const std::vector<Event>& events, int64_t pid, const PipelineStats& stats,
                 const std::set<std::pair<uint64_t, uint64_t>>& batches, bool whole = true) {
  // Each stage's spans are its runs, and every delivered batch went through each of them.
  for (const char* name : {"collate", "pack", "h2d", "event-wait"}) {
    const std::vector<Event> spans = of(events, "X", name, pid);
    if (whole) {
      EXPECT_EQ(spans.size(), stage(stats, name).items) << name;
    } else {
      EXPECT_LE(spans.size(), stage(stats, name).items) << name;
    }
    std::set<std::pair<uint64_t, uint64_t>> seen;
    for (const Event& e : spans) {
      seen.insert({e.epoch, e.batch});
      EXPECT_GE(e.dur, 0.0);
    }
    for (const auto& batch : batches)
      EXPECT_TRUE(seen.count(batch)) << name << " has no span for batch " << batch.first << "/" << batch.second;
  }
  if (whole) {
    EXPECT_EQ(of(events, "X", "plan", pid).size(), stats.planner.items_out);
  }
  // Decode: a span per group, each on a worker; the groups hold every delivered sample.
  uint64_t decoded = 0;
  std::set<std::pair<uint64_t, uint64_t>> decoded_batches;
  for (const Event& e : of(events, "X", "decode", pid)) {
    decoded += e.samples;
    decoded_batches.insert({e.epoch, e.batch});
  }
  EXPECT_GE(decoded, stats.samples);
  EXPECT_GE(decoded_batches.size(), batches.size());
  // The completion thread runs every event-wait span, never the consumer.
  std::set<int64_t> wait_threads;
  for (const Event& e : of(events, "X", "event-wait", pid)) wait_threads.insert(e.tid);
  EXPECT_EQ(wait_threads.size(), 1u);
  double waited_us = 0.0;
  for (const Event& e : of(events, "X", "wait in next()", pid)) {
    waited_us += e.dur;
    EXPECT_FALSE(wait_threads.count(e.tid)) << "a consumer's wait on the event-wait thread";
  }
  // The same waits as the report's, but those that found a batch ready (not traced: no wait).
  EXPECT_LE(waited_us, stats.consumer_wait_seconds * 1e6 + 1.0);
  EXPECT_GE(waited_us, stats.consumer_wait_seconds * 1e6 * 0.5 - 1000.0);
  // Counters: within their bounds, and up to the peaks the report gives.
  const std::vector<Event> tokens = of(events, "C", "batches holding a prefetch token", pid);
  const std::vector<Event> ready = of(events, "C", "batches ready for the consumer", pid);
  const std::vector<Event> slabs = of(events, "C", "pinned slabs in use", pid);
  ASSERT_FALSE(tokens.empty());
  ASSERT_FALSE(ready.empty());
  ASSERT_FALSE(slabs.empty());
  if (whole) {
    EXPECT_EQ(max_value(tokens), stats.in_flight.peak);
  }
  EXPECT_LE(max_value(tokens), stats.prefetch);
  if (whole) {
    EXPECT_EQ(max_value(ready), stats.ready_queue.peak);
  }
  EXPECT_LE(max_value(slabs), stats.pool.slab_count);
  // Each thread's events are written together: the file is not in time order. The last change (changes
  // at one time come in any order) leaves every token back.
  double last_ts = 0.0;
  for (const Event& e : tokens) last_ts = std::max(last_ts, e.ts);
  bool all_back = false;
  for (const Event& e : tokens) all_back = all_back || (e.ts == last_ts && e.value == 0);
  if (whole) {
    EXPECT_TRUE(all_back) << "every token came back by the end";
  }
  // Every thread that recorded is named, on this track.
  std::set<int64_t> named;
  for (const Event& e : events) {
    if (e.ph == "M" && e.name == "thread_name" && e.pid == pid) named.insert(e.tid);
  }
  for (const Event& e : events) {
    if (e.pid == pid && (e.ph == "X" || e.ph == "i")) {
      EXPECT_TRUE(named.count(e.tid)) << "thread " << e.tid;
    }
  }
}

// Runs to the end, taking every batch and checking its bytes; returns the (epoch, index) delivered.
std::set<std::pair<uint64_t, uint64_t>> take_all(Pipeline& pipeline, const SyntheticSource& truth) {
  std::set<std::pair<uint64_t, uint64_t>> batches;
  while (auto batch = pipeline.next()) {
    EXPECT_EQ(testing::compare_with_reference(*batch, truth), "");
    batches.insert({batch->epoch(), batch->index()});
  }
  return batches;
}

TEST(Trace, EveryBatchHasASpanInEveryStageAndTheSpansCountWhatTheReportCounts) {
  std::mt19937_64 random(0x7ace);
  for (const size_t threads : {1, 2, 4}) {
    testing::TempDir dir;
    const auto truth = std::make_shared<SyntheticSource>(dataset(40 + random() % 200, random()));
    PipelineOptions options;
    options.device = "cpu";
    options.decode_threads = threads;
    options.batch_size = 1 + random() % 16;
    options.prefetch = 1 + random() % 6;
    options.epochs = 2;
    options.trace = dir / "run.trace.json";
    SCOPED_TRACE(std::to_string(threads) + " threads, batch " + std::to_string(options.batch_size) + ", prefetch " +
                 std::to_string(options.prefetch));
    PipelineStats stats;
    std::set<std::pair<uint64_t, uint64_t>> batches;
    {
      Pipeline pipeline = make_pipeline(truth, options);
      batches = take_all(pipeline, *truth);
      stats = pipeline.stats();
    }
    const std::vector<Event> events = read_trace(options.trace);
    EXPECT_EQ(batches.size(), stats.batches);
    check_track(events, 0, stats, batches);
    std::vector<Event> names;
    for (const Event& e : events) {
      if (e.ph == "M" && e.name == "process_name") names.push_back(e);
    }
    ASSERT_EQ(names.size(), 1u);
    EXPECT_EQ(names[0].arg_name, "ferry cpu");
  }
}

TEST(Trace, EachSkippedSampleIsAnInstantEventWithItsKey) {
  testing::TempDir dir;
  const auto truth = std::make_shared<SyntheticSource>(dataset(120, 5));
  const std::set<uint64_t> failing{3, 40, 41, 99};
  auto source = std::make_shared<const testing::InstrumentedSource>(truth, failing, 50us);
  PipelineOptions options;
  options.device = "cpu";
  options.decode_threads = 3;
  options.batch_size = 8;
  options.on_error = OnError::kSkip;
  options.trace = dir / "skips.json";
  PipelineStats stats;
  {
    Pipeline pipeline = make_pipeline(source, options);
    while (pipeline.next()) {
    }
    stats = pipeline.stats();
  }
  const std::vector<Event> skipped = of(read_trace(options.trace), "i", "skipped sample");
  ASSERT_EQ(skipped.size(), stats.skipped_samples);
  std::set<uint64_t> indices;
  for (const Event& e : skipped) indices.insert(e.batch);
  EXPECT_EQ(indices, failing);
}

TEST(Trace, AGroupsDevicesShareOneFileATrackEach) {
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  testing::TempDir dir;
  const std::string path = dir / "group.json";
  const std::string yaml =
      "source:\n  kind: synthetic\n  samples: 150\n  seed: 3\n  fields:\n"
      "    - {name: id, dtype: int64, shape: [2]}\n"
      "batch_size: 5\ndecode: {threads: 2}\n";
  const Config config = parse_config(yaml, "<test>", {"transfer.devices=[cpu, cpu, cpu]", "stats.trace=" + path});
  std::vector<PipelineStats> stats;
  std::vector<std::set<std::pair<uint64_t, uint64_t>>> batches(3);
  {
    PipelineGroup group = make_pipeline_group(config, check_config(config));
    while (auto step = group.next()) {
      for (size_t d = 0; d < step->size(); ++d) batches[d].insert({(*step)[d].epoch(), (*step)[d].index()});
    }
    stats = group.stats();
  }
  const std::vector<Event> events = read_trace(path);
  std::map<int64_t, std::string> tracks;
  for (const Event& e : events) {
    if (e.ph == "M" && e.name == "process_name") tracks[e.pid] = e.arg_name;
  }
  ASSERT_EQ(tracks.size(), 3u);
  for (int64_t pid = 0; pid < 3; ++pid) {
    SCOPED_TRACE("device " + std::to_string(pid));
    EXPECT_EQ(tracks[pid], "ferry cpu");
    check_track(events, pid, stats[pid], batches[pid], /*whole=*/false);
  }
}

TEST(Trace, AMissingFolderIsAConfigProblemNamingTheKey) {
  try {
    (void)parse_config("source: {kind: synthetic, samples: 4}\n", "<test>",
                       {"stats.trace=/nonexistent-ferry-folder/trace.json"});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("stats.trace"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/nonexistent-ferry-folder"), std::string::npos) << e.what();
  }
}

TEST(Trace, TextThatIsNotUtf8StaysValidJsonAndTwoSpellingsOfAPathAreOneFile) {
  testing::TempDir dir;
  const auto start = detail::Trace::Clock::now();
  detail::Trace::Opened first = detail::Trace::open(dir / "t.json", "first", start, {"work"});
  // The same file named otherwise joins the open trace instead of emptying it.
  detail::Trace::Opened second = detail::Trace::open(dir.path() + "/./t.json", "second", start, {"work"});
  ASSERT_EQ(first.trace, second.trace);
  EXPECT_NE(first.track, second.track);
  // A key that is not UTF-8 (a file name in Latin-1), quotes, a control character, and well-formed UTF-8.
  first.trace->skipped(first.track, 10, 7, std::string("caf\xe9 \"q\"\x01.jpg"), "decode", "bad \xc3\xa9 \xff",
                       "worker");
  second.trace->span(second.track, 0, 5, 9, 0, 3, 0, "worker");
  first.trace->end_track(first.track, 100);
  second.trace->end_track(second.track, 100);  // the last: the file is finished
  const std::vector<Event> events = read_trace(dir / "t.json");
  const std::vector<Event> skipped = of(events, "i", "skipped sample");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].key, "caf\u00e9 \"q\"\x01.jpg");  // the byte 0xe9 read back as U+00E9
  ASSERT_EQ(of(events, "X", "work", 1).size(), 1u);
  // Named again after it was finished: a new file in its place.
  detail::Trace::Opened again = detail::Trace::open(dir / "t.json", "again", start, {"work"});
  EXPECT_NE(again.trace, first.trace);
  again.trace->end_track(again.track, 1);
  std::vector<Event> names;
  for (const Event& e : read_trace(dir / "t.json")) {
    if (e.ph == "M" && e.name == "process_name") names.push_back(e);
  }
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].arg_name, "again");
}

TEST(Trace, EveryEventOfManyThreadsIsWrittenOnceWithItsValues) {
  // Threads record thousands of events each (many blocks) and pause now and then, so that the writer
  // takes part of a block, then the rest, and hands read blocks back for reuse while they record.
  testing::TempDir dir;
  // The track's clock starts a second after the trace's: its times are written 1 s later.
  const auto start = detail::Trace::Clock::now() + 1s;
  detail::Trace::Opened trace = detail::Trace::open(dir / "t.json", "many", start, {"work"});
  std::mt19937 random(std::random_device{}());
  const int threads = 2 + static_cast<int>(random() % 5);
  const uint64_t per_thread = 3000 + random() % 5000;
  std::vector<uint64_t> pause_every;
  for (int t = 0; t < threads; ++t) pause_every.push_back(500 + random() % 1500);
  SCOPED_TRACE(::testing::Message() << threads << " threads of " << per_thread << " events, pausing every "
                                    << ::testing::PrintToString(pause_every));
  std::vector<std::thread> recorders;
  for (int t = 0; t < threads; ++t) {
    recorders.emplace_back([&, t] {
      for (uint64_t i = 0; i < per_thread; ++i) {
        trace.trace->span(trace.track, 0, i * 10, i * 10 + 7, t, i, i % 5, "worker");
        trace.trace->count(trace.track, detail::Trace::Counter::kReady, i * 10, i * 31 + t, "worker");
        // Past the writer's interval: now and then, and once just as the first block is full (2 events
        // a step), so that the writer reads a full block whose thread has not gone on yet.
        if (i % pause_every[t] == 0 || i + 1 == 512) std::this_thread::sleep_for(60ms);
      }
    });
  }
  for (std::thread& recorder : recorders) recorder.join();
  trace.trace->end_track(trace.track, per_thread * 10);
  const std::vector<Event> events = read_trace(dir / "t.json");
  // Times in nanoseconds of the track's clock (the file's microseconds have three decimals).
  const std::vector<Event> work = of(events, "X", "work");
  ASSERT_FALSE(work.empty());
  const int64_t offset = std::llround(work[0].ts * 1000.0) - static_cast<int64_t>(work[0].batch * 10);
  EXPECT_GT(offset, 900'000'000);
  const auto track_ns = [&](double ts) { return static_cast<uint64_t>(std::llround(ts * 1000.0) - offset); };
  std::set<std::pair<uint64_t, uint64_t>> spans;  // (thread, i)
  for (const Event& e : work) {
    EXPECT_EQ(track_ns(e.ts), e.batch * 10);
    EXPECT_EQ(std::llround(e.dur * 1000.0), 7);
    EXPECT_EQ(e.samples, e.batch % 5);
    EXPECT_TRUE(spans.emplace(e.epoch, e.batch).second) << "thread " << e.epoch << " event " << e.batch << " twice";
  }
  EXPECT_EQ(spans.size(), threads * per_thread);
  std::set<std::pair<uint64_t, uint64_t>> counts;  // (thread, i), from the value i * 31 + thread at time i * 10
  for (const Event& e : of(events, "C", "batches ready for the consumer")) {
    const uint64_t i = track_ns(e.ts) / 10;
    ASSERT_LT(e.value - i * 31, static_cast<uint64_t>(threads)) << "a counter's value does not match its time";
    EXPECT_TRUE(counts.emplace(e.value - i * 31, i).second);
  }
  EXPECT_EQ(counts.size(), threads * per_thread);
}

TEST(Trace, EachRankOfSeveralWritesAFileOfItsOwn) {
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  testing::TempDir dir;
  for (const char* rank : {"0", "1"}) {
    const Config config = parse_config(
        "source:\n  kind: synthetic\n  samples: 40\n  fields:\n    - {name: id, dtype: int64, shape: [2]}\n"
        "batch_size: 4\ntransfer: {device: cpu}\n",
        "<test>", {std::string("sampler.rank=") + rank, "sampler.world_size=2", "stats.trace=" + (dir / "run.json")});
    Pipeline pipeline = make_pipeline(config);
    while (pipeline.next()) {
    }
  }
  EXPECT_EQ(::access((dir / "run.json").c_str(), F_OK), -1) << "ranks do not share one file";
  EXPECT_FALSE(of(read_trace(dir / "run.rank0.json"), "X", "pack").empty());
  EXPECT_FALSE(of(read_trace(dir / "run.rank1.json"), "X", "pack").empty());
}

TEST(Trace, APipelineStoppedMidRunLeavesAWholeTrace) {
  testing::TempDir dir;
  const auto truth = std::make_shared<SyntheticSource>(dataset(400, 9));
  PipelineOptions options;
  options.device = "cpu";
  options.decode_threads = 2;
  options.batch_size = 4;
  options.trace = dir / "stopped.json";
  {
    Pipeline pipeline = make_pipeline(truth, options);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(pipeline.next());
  }  // destroyed with batches in flight
  const std::vector<Event> events = read_trace(options.trace);
  std::set<uint64_t> packed;
  for (const Event& e : of(events, "X", "pack")) packed.insert(e.batch);
  for (uint64_t b = 0; b < 5; ++b) EXPECT_TRUE(packed.count(b)) << b;
}

}  // namespace
}  // namespace ferry
