#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include <gtest/gtest.h>

#include <ferry/io/formats/synthetic_source.h>
#include <ferry/pipeline/pinned_pool.h>
#include <ferry/pipeline/pipeline_stats.h>
#include <ferry/stages/standard_pipeline.h>

namespace ferry {
namespace {

using namespace std::chrono_literals;

// ---- bottleneck_summary over hand-made stats ------------------------------------------------

StageStats stage(std::string name, size_t threads, double busy, double blocked, double wall) {
  StageStats stats;
  stats.name = std::move(name);
  stats.threads = threads;
  stats.busy_seconds = busy;
  stats.blocked_downstream_seconds = blocked;
  stats.account_idle_time(wall);
  return stats;
}

// A run of `wall` seconds with every stage idle; tests then make parts of it busy or blocked.
PipelineStats idle_run(double wall, size_t decode_threads = 4) {
  PipelineStats stats;
  stats.elapsed_seconds = wall;
  stats.decode_threads = decode_threads;
  stats.prefetch = 4;
  stats.batches = 100;
  stats.planner = stage("plan", 1, 0.001 * wall, 0.0, wall);
  for (const char* name : {"decode", "collate", "pack", "h2d", "event-wait"}) {
    stats.stages.push_back(stage(name, std::string(name) == "decode" ? decode_threads : 1, 0.01 * wall, 0.0, wall));
  }
  return stats;
}

StageStats& find(PipelineStats& stats, const std::string& name) {
  if (name == "plan") return stats.planner;
  for (StageStats& s : stats.stages) {
    if (s.name == name) return s;
  }
  throw std::invalid_argument(name);
}

void set_times(PipelineStats& stats, const std::string& name, double busy, double blocked = 0.0) {
  StageStats& s = find(stats, name);
  s.busy_seconds = busy;
  s.blocked_downstream_seconds = blocked;
  s.account_idle_time(stats.elapsed_seconds);
}

TEST(StageStats, IdleTimeIsWhatBusyAndBlockedLeaveOfWallTimesThreads) {
  const StageStats decode = stage("decode", 4, 30.0, 2.0, 10.0);
  EXPECT_DOUBLE_EQ(decode.capacity_seconds, 40.0);
  EXPECT_DOUBLE_EQ(decode.waiting_upstream_seconds, 8.0);
  EXPECT_DOUBLE_EQ(decode.busy_share(), 0.75);
  EXPECT_DOUBLE_EQ(decode.blocked_downstream_share(), 0.05);
  EXPECT_DOUBLE_EQ(decode.waiting_upstream_share(), 0.2);

  // Clocks read at slightly different moments can overbook a stage: idle time stays at 0, shares at 1.
  const StageStats overbooked = stage("pack", 1, 10.5, 0.0, 10.0);
  EXPECT_DOUBLE_EQ(overbooked.waiting_upstream_seconds, 0.0);
  EXPECT_DOUBLE_EQ(overbooked.busy_share(), 1.0);

  // A snapshot taken at once: no capacity, shares 0 rather than NaN.
  const StageStats instant = stage("h2d", 1, 0.0, 0.0, 0.0);
  EXPECT_DOUBLE_EQ(instant.capacity_seconds, 0.0);
  EXPECT_DOUBLE_EQ(instant.busy_share(), 0.0);
  const StageStats broken = stage("h2d", 1, 1.0, 0.0, std::numeric_limits<double>::quiet_NaN());
  EXPECT_DOUBLE_EQ(broken.capacity_seconds, 0.0);
  EXPECT_DOUBLE_EQ(broken.busy_share(), 0.0);
}

TEST(BottleneckSummary, NamesTheBusiestStageAndHowLongItsSuccessorWaitsForIt) {
  PipelineStats stats = idle_run(10.0, 4);
  set_times(stats, "decode", 38.8);  // 97% of 4 threads x 10 s
  set_times(stats, "collate", 4.0);  // waits the other 60%
  EXPECT_EQ(bottleneck_summary(stats),
            "decode is the bottleneck: 97% busy (4 threads), collate waits 60% of the time for it");
}

TEST(BottleneckSummary, ComparesStagesByShareOfTheirOwnCapacityNotBySeconds) {
  PipelineStats stats = idle_run(10.0, 8);
  set_times(stats, "decode", 40.0);  // more seconds than pack, but only half of 8 threads
  set_times(stats, "pack", 9.0);
  set_times(stats, "h2d", 1.0);
  EXPECT_EQ(bottleneck_summary(stats), "pack is the bottleneck: 90% busy (1 thread), h2d waits 90% of the time for it");
}

TEST(BottleneckSummary, TheLastStageIsWaitedForByTheConsumer) {
  PipelineStats stats = idle_run(10.0);
  set_times(stats, "event-wait", 9.5);
  stats.consumer_wait_seconds = 7.0;
  EXPECT_EQ(bottleneck_summary(stats),
            "event-wait is the bottleneck: 95% busy (1 thread), the consumer waits 70% of the time for it");
}

TEST(BottleneckSummary, NamesTheGpuDecoderWhenItsStatesAreBusierThanAnyStage) {
  PipelineStats stats = idle_run(10.0, 16);
  set_times(stats, "decode", 64.0);  // 40% of 16 threads x 10 s
  stats.gpu_decode.enabled = true;
  stats.gpu_decode.states = 4;
  stats.gpu_decode.busy_seconds = 9.9;
  stats.gpu_decode.state_busy_seconds = 34.0;  // 85% of 4 states x 10 s
  EXPECT_DOUBLE_EQ(stats.gpu_decoder_share(), 0.85);
  EXPECT_EQ(bottleneck_summary(stats),
            "the GPU decoder is the bottleneck: its 4 decoding states were in use 85% of the time, decode was 40% "
            "busy");
  // Busy (a call in it) is not full: one state in use all the time is a quarter of its capacity, and a
  // saturated stage is named instead.
  stats.gpu_decode.state_busy_seconds = 10.0;
  set_times(stats, "decode", 150.0);
  EXPECT_EQ(bottleneck_summary(stats).rfind("decode is the bottleneck: 94% busy (16 threads)", 0), 0u)
      << bottleneck_summary(stats);
  // Without GPU decoding the share is 0 whatever the numbers say.
  stats.gpu_decode.enabled = false;
  EXPECT_EQ(stats.gpu_decoder_share(), 0.0);
}

TEST(BottleneckSummary, NamesUserCodeWhoseWorkersAreSaturated) {
  PipelineStats stats = idle_run(10.0, 4);
  set_times(stats, "decode", 39.0);  // its threads wait for the workers, which counts as busy
  UserCodeStats code;
  code.what = "python dataset 'pkg.data:make'";
  code.processes = 4;
  code.busy_seconds = 38.4;  // 96% of 4 processes x 10 s
  stats.user_code.push_back(code);
  EXPECT_EQ(bottleneck_summary(stats),
            "python dataset 'pkg.data:make' is the bottleneck: its 4 worker processes were 96% busy "
            "(decode.workers sets how many)");
  // On the decode threads: their capacity, and the GIL named.
  stats.user_code.front().processes = 0;
  EXPECT_EQ(bottleneck_summary(stats),
            "python dataset 'pkg.data:make' is the bottleneck: it kept the 4 threads of decode 96% busy, taking "
            "turns with the GIL (decode.workers: a number runs it in worker processes, side by side)");
  // Idle workers: decode's own time is the bottleneck.
  stats.user_code.front().processes = 4;
  stats.user_code.front().busy_seconds = 4.0;
  EXPECT_EQ(bottleneck_summary(stats).rfind("decode is the bottleneck", 0), 0u) << bottleneck_summary(stats);
  // A busier later stage is named before workers that are less busy than it.
  stats.user_code.front().busy_seconds = 24.0;  // 60%
  set_times(stats, "decode", 20.0);
  set_times(stats, "pack", 9.5);
  EXPECT_EQ(bottleneck_summary(stats).rfind("pack is the bottleneck", 0), 0u) << bottleneck_summary(stats);
}

TEST(BottleneckSummary, ASlowPlannerIsWaitedForByDecode) {
  PipelineStats stats = idle_run(10.0, 2);
  set_times(stats, "plan", 8.0);
  set_times(stats, "decode", 2.0);  // 10% of 2 x 10 s: waits 90%
  EXPECT_EQ(bottleneck_summary(stats),
            "plan is the bottleneck: 80% busy (1 thread), decode waits 90% of the time for it");
}

TEST(BottleneckSummary, NamesTheConsumerWhenReadyBatchesHoldEveryToken) {
  PipelineStats stats = idle_run(10.0);
  set_times(stats, "plan", 0.01, 9.0);
  stats.in_flight = OccupancyStats{3.9, 4, 4, 9.0};
  stats.ready_queue = OccupancyStats{3.5, 4, 4, 8.0};  // full: nothing left to do until the consumer takes one
  EXPECT_EQ(bottleneck_summary(stats),
            "the consumer is the bottleneck: the pipeline waited 80% of the time for it to take batches");
}

// Every token in use is not the consumer's doing when the batches holding them are still being made.
TEST(BottleneckSummary, TokensAllInUseByASlowStageDoNotBlameTheConsumer) {
  PipelineStats stats = idle_run(10.0, 1);
  set_times(stats, "plan", 0.01, 9.4);
  set_times(stats, "decode", 8.6);
  stats.in_flight = OccupancyStats{2.9, 3, 3, 9.5};
  stats.ready_queue = OccupancyStats{0.01, 3, 3, 0.0};
  stats.consumer_wait_seconds = 9.6;
  EXPECT_EQ(bottleneck_summary(stats),
            "decode is the bottleneck: 86% busy (1 thread), collate waits 99% of the time for it");
}

TEST(BottleneckSummary, AStageBusierThanTheConsumerIsSlowWinsOverIt) {
  PipelineStats stats = idle_run(10.0);
  stats.ready_queue.full_seconds = 6.0;
  set_times(stats, "collate", 9.0);
  EXPECT_EQ(bottleneck_summary(stats),
            "collate is the bottleneck: 90% busy (1 thread), pack waits 99% of the time for it");
  stats.ready_queue.full_seconds = 9.5;
  EXPECT_EQ(bottleneck_summary(stats),
            "the consumer is the bottleneck: the pipeline waited 95% of the time for it to take batches");
}

TEST(BottleneckSummary, NamesNoStageWhenNoneIsSaturated) {
  PipelineStats stats = idle_run(10.0);
  set_times(stats, "decode", 12.0);  // 30% of 4 threads
  EXPECT_EQ(bottleneck_summary(stats), "no stage is the bottleneck: the busiest, decode, was 30% busy (4 threads)");

  // The consumer waits although nothing is saturated: batches take long to come through. The line says
  // where a batch's time went (Note [per-batch cost]): 100 batches in 10 s with 3.9 in flight is 0.39 s
  // each from plan to consumer, and the stages' busy times add up to 124.1 ms a batch.
  stats.consumer_wait_seconds = 7.0;
  stats.in_flight = OccupancyStats{3.9, 4, 4, 9.0};
  EXPECT_EQ(bottleneck_summary(stats),
            "no stage is the bottleneck: the busiest, decode, was 30% busy (4 threads); the consumer waited 70% of "
            "the time: a batch took 390.00 ms from its plan to the consumer, its stages busy 124.10 ms a batch, so at "
            "least 265.90 ms went on hand-offs and queues (with all 4 prefetch tokens in use: a larger prefetch "
            "overlaps more batches)");
  // Tokens to spare: more of them would not be used.
  stats.in_flight = OccupancyStats{1.5, 4, 4, 0.0};
  EXPECT_EQ(bottleneck_summary(stats),
            "no stage is the bottleneck: the busiest, decode, was 30% busy (4 threads); the consumer waited 70% of "
            "the time: a batch took 150.00 ms from its plan to the consumer, its stages busy 124.10 ms a batch, so at "
            "least 25.90 ms went on hand-offs and queues (1.5 of 4 prefetch tokens in use on average: a larger "
            "prefetch would not help)");
  // Busy longer than the latency (decode's threads summed): nothing is said about hand-offs.
  stats.in_flight = OccupancyStats{1.0, 4, 4, 0.0};
  EXPECT_EQ(bottleneck_summary(stats),
            "no stage is the bottleneck: the busiest, decode, was 30% busy (4 threads); the consumer waited 70% of "
            "the time: a batch took 100.00 ms from its plan to the consumer, its stages busy 124.10 ms a batch (1.0 "
            "of 4 prefetch tokens in use on average: a larger prefetch would not help)");
}

TEST(PerBatchSummary, SaysWhereABatchsTimeWent) {
  // A token run: 40 000 batches in 1 s, 16 decode threads, 10 batches in flight on average.
  PipelineStats stats = idle_run(1.0, 16);
  stats.batches = 40'000;
  stats.in_flight = OccupancyStats{10.0, 16, 16, 0.0};
  set_times(stats, "plan", 0.02);
  set_times(stats, "decode", 0.688);
  set_times(stats, "collate", 0.092);
  set_times(stats, "pack", 0.68);
  set_times(stats, "h2d", 0.568);
  set_times(stats, "event-wait", 0.392);
  stats.consumer_wait_seconds = 0.536;
  EXPECT_DOUBLE_EQ(stats.seconds_per_batch(), 25e-6);
  EXPECT_DOUBLE_EQ(stats.batch_latency_seconds(), 250e-6);
  EXPECT_DOUBLE_EQ(stats.busy_per_batch_seconds(find(stats, "pack")), 17e-6);
  EXPECT_EQ(per_batch_summary(stats),
            "25.0 us a batch; 250.0 us from plan to consumer; busy a batch: plan 0.5, decode 17.2 (16 threads), "
            "collate 2.3, pack 17.0, h2d 14.2, event-wait 9.8 us (61.0 us in all); the consumer waited 13.4 us");

  PipelineStats fresh;
  EXPECT_EQ(fresh.seconds_per_batch(), 0.0);
  EXPECT_EQ(fresh.batch_latency_seconds(), 0.0);
  EXPECT_EQ(per_batch_summary(fresh), "no batch delivered yet");
}

// Note [batch path] over hand-made numbers: 100 batches whose legs add up to 500 us each.
BatchPathStats measured_path() {
  BatchPathStats path;
  path.batches = 100;
  const std::vector<std::pair<const char*, double>> legs{
      {"plan to collated", 0.0107}, {"to pack", 0.0388},    {"pack", 0.0008},       {"to h2d", 0.0037}, {"h2d", 0.0011},
      {"to event-wait", 0.0024},    {"event-wait", 0.0007}, {"to consumer", 0.0018}};
  for (const auto& [name, seconds] : legs) {
    path.legs.push_back(BatchPathStats::Leg{name, std::string(name).rfind("to ", 0) == 0, seconds});
  }
  return path;
}

TEST(BatchPathSummary, SaysEachLegsTimeABatch) {
  PipelineStats stats = idle_run(1.0);
  stats.batch_path = measured_path();
  EXPECT_NEAR(stats.batch_path.latency_seconds(), 600e-6, 1e-12);
  EXPECT_NEAR(stats.batch_path.seconds_per_batch(stats.batch_path.legs[1]), 388e-6, 1e-12);
  ASSERT_NE(stats.batch_path.longest_wait(), nullptr);
  EXPECT_EQ(stats.batch_path.longest_wait()->name, "to pack");
  EXPECT_EQ(batch_path_summary(stats),
            "600.0 us from plan to consumer (100 batches): plan to collated 107.0, to pack 388.0, pack 8.0, to h2d "
            "37.0, h2d 11.0, to event-wait 24.0, event-wait 7.0, to consumer 18.0 us");

  PipelineStats fresh;
  EXPECT_EQ(batch_path_summary(fresh), "no batch delivered yet");
  EXPECT_EQ(fresh.batch_path.latency_seconds(), 0.0);
  EXPECT_EQ(fresh.batch_path.longest_wait(), nullptr);
}

// A latency-bound run names the queue where its batches waited longest, as measured.
TEST(BottleneckSummary, ALatencyBoundRunNamesItsLongestQueue) {
  PipelineStats stats = idle_run(10.0);
  set_times(stats, "decode", 12.0);
  stats.consumer_wait_seconds = 7.0;
  stats.in_flight = OccupancyStats{3.9, 4, 4, 9.0};
  stats.batch_path = measured_path();
  EXPECT_EQ(bottleneck_summary(stats),
            "no stage is the bottleneck: the busiest, decode, was 30% busy (4 threads); the consumer waited 70% of "
            "the time: a batch took 390.00 ms from its plan to the consumer, its stages busy 124.10 ms a batch, so at "
            "least 265.90 ms went on hand-offs and queues, the longest queue to pack: 388.0 us a batch (with all 4 "
            "prefetch tokens in use: a larger prefetch overlaps more batches)");
}

// The devices of a group time the same legs: the group's are their sums.
TEST(BatchPathStats, MergedStatsAddTheDevicesLegs) {
  PipelineStats one = idle_run(1.0);
  one.batch_path = measured_path();
  PipelineStats none = idle_run(1.0);  // delivered nothing: no legs listed
  const PipelineStats all = merged_stats({none, one, one});
  EXPECT_EQ(all.batch_path.batches, 200u);
  ASSERT_EQ(all.batch_path.legs.size(), 8u);
  EXPECT_DOUBLE_EQ(all.batch_path.legs[1].seconds, 2 * 0.0388);
  EXPECT_NEAR(all.batch_path.latency_seconds(), 600e-6, 1e-12);
}

TEST(BottleneckSummary, SaysWhenARunIsTooShortOrHasNotRun) {
  PipelineStats stats = idle_run(0.02);
  set_times(stats, "decode", 0.012);
  EXPECT_EQ(bottleneck_summary(stats),
            "no stage is the bottleneck: the busiest, decode, was 15% busy (4 threads); a run of 0.02 s is too short "
            "to tell");

  PipelineStats fresh;  // a snapshot before anything ran
  EXPECT_EQ(bottleneck_summary(fresh), "no bottleneck to name: the pipeline has not run");
  fresh.elapsed_seconds = std::numeric_limits<double>::infinity();
  EXPECT_EQ(bottleneck_summary(fresh), "no bottleneck to name: the pipeline has not run");

  PipelineStats started = idle_run(0.5);
  for (StageStats& s : started.stages) set_times(started, s.name, 0.0);
  set_times(started, "plan", 0.0);
  EXPECT_EQ(bottleneck_summary(started), "no bottleneck to name: no stage has worked yet (0.5 s since the start)");
}

TEST(PipelineStats, DerivedConsumerFiguresAreFiniteForEmptyRuns) {
  PipelineStats stats;
  EXPECT_DOUBLE_EQ(stats.consumer_wait_per_batch_seconds(), 0.0);
  EXPECT_DOUBLE_EQ(stats.consumer_wait_share(), 0.0);
  EXPECT_DOUBLE_EQ(stats.waited_for_consumer_share(), 0.0);
  stats.elapsed_seconds = 4.0;
  stats.batches = 8;
  stats.consumer_wait_seconds = 1.0;
  stats.ready_queue.full_seconds = 2.0;
  EXPECT_DOUBLE_EQ(stats.consumer_wait_per_batch_seconds(), 0.125);
  EXPECT_DOUBLE_EQ(stats.consumer_wait_share(), 0.25);
  EXPECT_DOUBLE_EQ(stats.waited_for_consumer_share(), 0.5);
}

TEST(PinnedPoolStats, TimesWaitsForASlabAndCountsNoAllocationAfterStart) {
  PinnedPoolOptions options;
  options.slab_bytes = 4096;
  options.slab_count = 1;
  options.pinned = false;
  auto pool = PinnedPool::create(options);
  EXPECT_EQ(pool->stats().allocations_after_start, 0u);
  EXPECT_EQ(pool->stats().wait_seconds, 0.0);
  std::optional<PinnedLease> held = pool->try_acquire();
  ASSERT_TRUE(held);
  EXPECT_FALSE(pool->acquire(std::chrono::milliseconds(5))) << "the only slab is leased";
  const PinnedPoolStats stats = pool->stats();
  EXPECT_EQ(stats.waits, 1u);
  EXPECT_GT(stats.wait_seconds, 0.0) << "a wait that ran to its timeout took time";
  EXPECT_EQ(stats.allocations_after_start, 0u);
  held.reset();
  EXPECT_TRUE(pool->acquire(std::chrono::milliseconds(5))) << "free again: no wait";
  EXPECT_EQ(pool->stats().waits, 1u);
  EXPECT_EQ(pool->stats().wait_seconds, stats.wait_seconds);
}

// ---- the stats a real pipeline reports -------------------------------------------------------

SyntheticOptions small_dataset(uint64_t samples) {
  SyntheticOptions options;
  options.seed = 7;
  options.samples = samples;
  options.fields = {
      SyntheticField{"image", at::kByte, {3, 8, 8}, false, 0, 0, std::nullopt},
      SyntheticField{"tokens", at::kInt, {}, true, 1, 30, std::nullopt},
  };
  return options;
}

// Options for a CPU pipeline in batches of `batch_size`; tests set the rest.
PipelineOptions cpu_options(size_t batch_size) {
  PipelineOptions options;
  options.device = "cpu";
  options.batch_size = batch_size;
  return options;
}

// A pipeline over small_dataset(samples).
Pipeline small_pipeline(uint64_t samples, const PipelineOptions& options) {
  return make_pipeline(std::make_shared<const SyntheticSource>(small_dataset(samples)), options);
}

// Structure and counts only: timings are whatever the machine gives, so the only time checks are
// identities that hold for any measured values.
void expect_consistent(const StageStats& stage, double wall) {
  SCOPED_TRACE(stage.name);
  EXPECT_LE(stage.items_out, stage.items_in);
  EXPECT_DOUBLE_EQ(stage.capacity_seconds, wall * static_cast<double>(stage.threads));
  EXPECT_GE(stage.busy_seconds, 0.0);
  EXPECT_GE(stage.blocked_downstream_seconds, 0.0);
  EXPECT_GE(stage.waiting_upstream_seconds, 0.0);
  // Waiting is the rest of the capacity, so the three add up to it unless busy + blocked overbook it.
  const double accounted = stage.busy_seconds + stage.blocked_downstream_seconds + stage.waiting_upstream_seconds;
  EXPECT_NEAR(accounted, std::max(stage.capacity_seconds, stage.busy_seconds + stage.blocked_downstream_seconds),
              1e-9 * std::max(1.0, accounted));
  for (const double share : {stage.busy_share(), stage.waiting_upstream_share(), stage.blocked_downstream_share()}) {
    EXPECT_GE(share, 0.0);
    EXPECT_LE(share, 1.0);
  }
}

struct Shape {
  size_t decode_threads;
  size_t prefetch;
};

class PipelineStatsAfterARun : public ::testing::TestWithParam<Shape> {};

TEST_P(PipelineStatsAfterARun, CountEveryItemInAndOutOfEveryStage) {
  PipelineOptions options = cpu_options(8);
  options.epochs = 2;
  options.decode_threads = GetParam().decode_threads;
  options.prefetch = GetParam().prefetch;
  Pipeline pipeline = small_pipeline(203, options);
  uint64_t batches = 0;
  uint64_t samples = 0;
  for (const Batch& batch : pipeline) {
    ++batches;
    samples += batch.batch_size();
  }
  ASSERT_EQ(batches, 52u);  // 26 per epoch of 203 samples, the last one short
  ASSERT_EQ(samples, 406u);
  const PipelineStats stats = pipeline.stats();
  const double wall = stats.elapsed_seconds;
  EXPECT_GT(wall, 0.0);
  EXPECT_EQ(stats.batches, batches);
  EXPECT_EQ(stats.samples, samples);

  EXPECT_EQ(stats.planner.name, "plan");
  EXPECT_EQ(stats.planner.threads, 1u);
  EXPECT_EQ(stats.planner.items_in, samples);
  EXPECT_EQ(stats.planner.items_out, batches);
  EXPECT_EQ(stats.planner.in_unit, "samples");
  EXPECT_EQ(stats.planner.out_unit, "batches");
  expect_consistent(stats.planner, wall);

  ASSERT_EQ(stats.stages.size(), 5u);
  const char* names[] = {"decode", "collate", "pack", "h2d", "event-wait"};
  for (size_t i = 0; i < 5; ++i) {
    const StageStats& stage = stats.stages[i];
    EXPECT_EQ(stage.name, names[i]);
    EXPECT_EQ(stage.threads, i == 0 ? options.decode_threads : 1u);
    expect_consistent(stage, wall);
    // A full run without errors: everything that went in came out.
    const uint64_t in = i <= 1 ? samples : batches;
    const uint64_t out = i == 0 ? samples : batches;
    EXPECT_EQ(stage.items_in, in) << stage.name;
    EXPECT_EQ(stage.items_out, out) << stage.name;
    EXPECT_EQ(stage.in_unit, i <= 1 ? "samples" : "batches") << stage.name;
    EXPECT_EQ(stage.out_unit, i == 0 ? "samples" : "batches") << stage.name;
  }
  EXPECT_EQ(stats.stages[1].items, batches) << "collate's runs are batches";

  EXPECT_EQ(stats.in_flight.capacity, options.prefetch);
  EXPECT_GE(stats.in_flight.peak, 1u);
  EXPECT_LE(stats.in_flight.peak, options.prefetch);
  EXPECT_GE(stats.in_flight.mean, 0.0);
  EXPECT_LE(stats.in_flight.mean, static_cast<double>(options.prefetch));
  EXPECT_EQ(stats.ready_queue.capacity, options.prefetch);
  EXPECT_GE(stats.ready_queue.peak, 1u);
  EXPECT_LE(stats.ready_queue.peak, options.prefetch);
  EXPECT_EQ(stats.ready_queue_peak, stats.ready_queue.peak);
  EXPECT_LE(stats.ready_queue.mean, static_cast<double>(options.prefetch));
  EXPECT_GE(stats.ready_queue.full_seconds, 0.0);
  EXPECT_LE(stats.ready_queue.full_seconds, wall);
  EXPECT_LE(stats.in_flight.full_seconds, wall);
  EXPECT_LE(stats.planner.blocked_downstream_seconds, stats.in_flight.full_seconds) << "blocked only while full";
  EXPECT_LE(stats.consumer_waits, batches + 1) << "at most every next() call, the one meeting the end included";
  EXPECT_GE(stats.consumer_wait_seconds, 0.0);

  EXPECT_EQ(stats.pool.allocations_after_start, 0u);
  EXPECT_EQ(stats.pool.waits, 0u) << "Note [tokens]: the pool has a slab for every token";
  EXPECT_EQ(stats.pool.wait_seconds, 0.0);
  EXPECT_EQ(stats.stages[2].blocked_downstream_seconds, 0.0) << "pack's blocked time is the pool's wait time";
  EXPECT_EQ(stats.skipped_samples, 0u);
  EXPECT_TRUE(stats.skipped.empty());
  EXPECT_FALSE(bottleneck_summary(stats).empty());
}

INSTANTIATE_TEST_SUITE_P(Threads, PipelineStatsAfterARun,
                         ::testing::Values(Shape{1, 1}, Shape{2, 2}, Shape{4, 3}, Shape{8, 6}),
                         [](const auto& param_info) {
                           return "threads" + std::to_string(param_info.param.decode_threads) + "_prefetch" +
                                  std::to_string(param_info.param.prefetch);
                         });

TEST(PipelineStats, TheClockStopsAtTheEndOfTheRun) {
  Pipeline pipeline = small_pipeline(40, cpu_options(8));
  for (const Batch& batch : pipeline) (void)batch;
  const PipelineStats at_end = pipeline.stats();
  std::this_thread::sleep_for(20ms);
  const PipelineStats later = pipeline.stats();
  // Rates read long after the end stay those of the run.
  EXPECT_EQ(later.elapsed_seconds, at_end.elapsed_seconds);
  EXPECT_EQ(later.stages[0].capacity_seconds, at_end.stages[0].capacity_seconds);
  EXPECT_EQ(later.in_flight.mean, at_end.in_flight.mean);
}

// The first batch's time and samples, and the steady rate after it: from a run, and from numbers.
TEST(PipelineStats, TheFirstBatchSeparatesTheStartFromTheSteadyRate) {
  Pipeline pipeline = small_pipeline(43, cpu_options(8));
  EXPECT_EQ(pipeline.stats().first_batch_seconds, 0.0) << "before any batch";
  size_t taken = 0;
  for (const Batch& batch : pipeline) {
    (void)batch;
    if (++taken == 1) {
      const PipelineStats first = pipeline.stats();
      EXPECT_GT(first.first_batch_seconds, 0.0);
      EXPECT_EQ(first.first_batch_samples, 8u);
      EXPECT_EQ(first.samples_per_second_after_first_batch(), 0.0) << "one batch: no steady rate yet";
    }
  }
  const PipelineStats stats = pipeline.stats();
  EXPECT_LE(stats.first_batch_seconds, stats.elapsed_seconds);
  EXPECT_EQ(stats.first_batch_samples, 8u);

  PipelineStats numbers;
  numbers.elapsed_seconds = 3.0;
  numbers.first_batch_seconds = 1.0;
  numbers.first_batch_samples = 100;
  numbers.batches = 11;
  numbers.samples = 1100;
  EXPECT_DOUBLE_EQ(numbers.samples_per_second_after_first_batch(), 500.0);  // 1000 samples in 2 s
  numbers.first_batch_seconds = 3.0;  // the first batch at the very end: no time after it
  EXPECT_EQ(numbers.samples_per_second_after_first_batch(), 0.0);
}

// Note [batch path] on a real run: every batch timed, and its legs add up to no more than the run.
TEST(PipelineStats, EveryDeliveredBatchIsTimedLegByLeg) {
  for (const size_t threads : {1, 2, 4}) {
    SCOPED_TRACE(threads);
    PipelineOptions options = cpu_options(8);
    options.decode_threads = threads;
    Pipeline pipeline = small_pipeline(400, options);
    EXPECT_EQ(pipeline.stats().batch_path.batches, 0u);
    EXPECT_EQ(pipeline.stats().batch_path.legs.size(), 8u) << "listed from the start";
    uint64_t taken = 0;
    for (const Batch& batch : pipeline) {
      (void)batch;
      ++taken;
    }
    PipelineStats stats = pipeline.stats();
    const BatchPathStats& path = stats.batch_path;
    EXPECT_EQ(path.batches, taken);
    EXPECT_EQ(path.batches, stats.batches);
    ASSERT_EQ(path.legs.size(), 8u);
    double sum = 0.0;
    for (const BatchPathStats::Leg& leg : path.legs) {
      EXPECT_GE(leg.seconds, 0.0) << leg.name;
      sum += leg.seconds;
    }
    EXPECT_GT(path.legs[0].seconds, 0.0) << "decoding takes time";
    EXPECT_GT(sum, 0.0);
    // Each batch lies within the run, so no batch's latency exceeds it; at most `prefetch` overlap.
    EXPECT_LE(path.latency_seconds(), stats.elapsed_seconds);
    EXPECT_LE(sum, stats.elapsed_seconds * static_cast<double>(options.prefetch + 1));
    // The working legs are the stages' own timed bodies, batch by batch.
    EXPECT_NEAR(path.legs[4].seconds, find(stats, "h2d").busy_seconds, 1e-9);
  }
}

TEST(PipelineStats, CloseStopsTheClockToo) {
  Pipeline pipeline = small_pipeline(400, cpu_options(4));
  ASSERT_TRUE(pipeline.next());
  pipeline.close();
  const double at_close = pipeline.stats().elapsed_seconds;
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(pipeline.stats().elapsed_seconds, at_close);
  EXPECT_EQ(pipeline.stats().batches, 1u);
}

// A consumer that does not take batches leaves every token held by a ready batch: the planner has
// to wait, the ready queue is full, and that time is the pipeline waiting for the consumer.
TEST(PipelineStats, APausedConsumerShowsAsPlanningBlockedOnTokens) {
  PipelineOptions options = cpu_options(4);
  options.prefetch = 3;
  Pipeline pipeline = small_pipeline(400, options);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  // Waits (not sleep-and-hope) until a ready batch holds every token, then leaves it so a while.
  auto wait_until_tokens_run_out = [&](uint64_t taken) {
    while (pipeline.stats().stages[4].items_out < taken + options.prefetch) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "delivered " << pipeline.stats().stages[4].items_out << " with " << taken << " taken";
        return false;
      }
      std::this_thread::sleep_for(1ms);
    }
    std::this_thread::sleep_for(2ms);
    return true;
  };
  for (uint64_t taken = 0; taken < 5; ++taken) {
    ASSERT_TRUE(wait_until_tokens_run_out(taken));
    ASSERT_TRUE(pipeline.next());
  }
  ASSERT_TRUE(wait_until_tokens_run_out(5));
  const PipelineStats stats = pipeline.stats();
  EXPECT_GT(stats.planner.blocked_downstream_seconds, 0.0);
  EXPECT_GT(stats.in_flight.full_seconds, 0.0);
  EXPECT_GT(stats.ready_queue.full_seconds, 0.0);
  EXPECT_GT(stats.waited_for_consumer_share(), 0.0);
  EXPECT_EQ(stats.ready_queue.peak, options.prefetch);
  EXPECT_GE(stats.in_flight.full_seconds, stats.planner.blocked_downstream_seconds) << "blocked only while full";
  EXPECT_EQ(stats.in_flight.peak, options.prefetch) << "capped at the tokens";
  // oneTBB's input node may make one plan beyond the tokens and hold it; never more.
  EXPECT_LE(stats.planner.items_out, 5 + options.prefetch + 1);
  EXPECT_GE(stats.ready_queue.peak, 1u);
}

// stats() is meant for a progress line or a Python monitor on another thread: it must be safe while
// the pipeline runs, and its counts never run backwards or contradict each other.
TEST(PipelineStats, ASnapshotFromAnotherThreadWhileRunningIsConsistent) {
  PipelineOptions options = cpu_options(4);
  options.decode_threads = 4;
  Pipeline pipeline = small_pipeline(2000, options);
  std::atomic<bool> done{false};
  std::atomic<int> snapshots{0};
  std::thread watcher([&] {
    PipelineStats previous = pipeline.stats();
    while (!done.load()) {
      const PipelineStats now = pipeline.stats();
      EXPECT_GE(now.batches, previous.batches);
      // The clock may step back by the instant between reading it and seeing the end of the run.
      EXPECT_GE(now.elapsed_seconds + 1e-3, previous.elapsed_seconds);
      EXPECT_LE(now.in_flight.peak, options.prefetch);
      EXPECT_LE(now.ready_queue.peak, options.prefetch);
      EXPECT_LE(now.planner.items_out, now.planner.items_in);
      EXPECT_GE(now.planner.items_out, previous.planner.items_out);
      for (size_t i = 0; i < now.stages.size(); ++i) {
        EXPECT_LE(now.stages[i].items_out, now.stages[i].items_in) << now.stages[i].name;
        EXPECT_GE(now.stages[i].items_in, previous.stages[i].items_in) << now.stages[i].name;
      }
      previous = now;
      snapshots.fetch_add(1);
    }
  });
  uint64_t batches = 0;
  for (const Batch& batch : pipeline) {
    (void)batch;
    ++batches;
  }
  done.store(true);
  watcher.join();
  EXPECT_EQ(batches, 500u);
  EXPECT_EQ(pipeline.stats().batches, 500u);
  EXPECT_GT(snapshots.load(), 0);
}

}  // namespace
}  // namespace ferry
