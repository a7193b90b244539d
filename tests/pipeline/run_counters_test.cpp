// RunCounters on its own: the counts a running graph leaves become the PipelineStats it reports.
#include <ferry/pipeline/run_counters.h>

#include <string>

#include <gtest/gtest.h>

namespace ferry::detail {
namespace {

RunCounters::Setting setting(uint64_t run_ns) {
  return RunCounters::Setting{run_ns, "cpu", 3, 2, {"decode", "collate", "pack", "h2d", "event-wait"}, nullptr};
}

TEST(RunCounters, SnapshotReportsEachStagesCountsAndTimesInTheReportsUnits) {
  RunCounters run(2);
  run.planned_batches = 10;
  run.planned_samples = 40;
  run.planning_ns = 1'000'000;
  RunCounters::StageCounter& decode = run.stages[kDecode];
  decode.items = 40;
  decode.not_out = 3;
  decode.busy_ns = 300'000'000;
  RunCounters::StageCounter& collate = run.stages[kCollate];
  collate.items = 10;
  collate.units_in = 37;
  run.stages[kEventWait].blocked_ns = 5'000'000;
  run.delivered_batches = 9;
  run.delivered_samples = 36;
  run.delivered_bytes = 9000;
  run.consumer_wait_ns = 2'000'000;
  run.consumer_waits = 4;

  const PipelineStats stats = run.snapshot(setting(1'000'000'000));
  EXPECT_EQ(stats.device, "cpu");
  EXPECT_EQ(stats.decode_threads, 3u);
  EXPECT_EQ(stats.prefetch, 2u);
  EXPECT_DOUBLE_EQ(stats.elapsed_seconds, 1.0);
  EXPECT_EQ(stats.batches, 9u);
  EXPECT_EQ(stats.samples, 36u);
  EXPECT_EQ(stats.bytes, 9000u);
  EXPECT_DOUBLE_EQ(stats.consumer_wait_seconds, 0.002);
  EXPECT_EQ(stats.consumer_waits, 4u);
  EXPECT_EQ(stats.planner.name, "plan");
  EXPECT_EQ(stats.planner.items_in, 40u);
  EXPECT_EQ(stats.planner.items_out, 10u);
  EXPECT_DOUBLE_EQ(stats.planner.busy_seconds, 0.001);
  ASSERT_EQ(stats.stages.size(), static_cast<size_t>(kStageCount));
  const StageStats& decoded = stats.stages[kDecode];
  EXPECT_EQ(decoded.name, "decode");
  EXPECT_EQ(decoded.threads, 3u);
  EXPECT_EQ(decoded.items_in, 40u);
  EXPECT_EQ(decoded.items_out, 37u);  // three failed
  EXPECT_EQ(decoded.in_unit, "samples");
  EXPECT_DOUBLE_EQ(decoded.busy_seconds, 0.3);
  EXPECT_EQ(stats.stages[kCollate].items_in, 37u);  // samples in, batches out
  EXPECT_EQ(stats.stages[kCollate].out_unit, "batches");
  EXPECT_EQ(stats.stages[kPack].threads, 1u);
  EXPECT_DOUBLE_EQ(stats.stages[kEventWait].blocked_downstream_seconds, 0.005);
}

TEST(RunCounters, CountsEverySkippedSampleAndListsTheFirstHundred) {
  RunCounters run(1);
  for (uint64_t i = 0; i < PipelineStats::kMaxListedSkips + 20; ++i) {
    EXPECT_EQ(run.add_skipped(SkippedSample{i, "key-" + std::to_string(i), "decode", "bad"}), i + 1);
  }
  const PipelineStats stats = run.snapshot(setting(1));
  EXPECT_EQ(stats.skipped_samples, PipelineStats::kMaxListedSkips + 20);
  ASSERT_EQ(stats.skipped.size(), PipelineStats::kMaxListedSkips);
  EXPECT_EQ(stats.skipped.front().key, "key-0");
  EXPECT_EQ(stats.skipped.back().index, PipelineStats::kMaxListedSkips - 1);
}

}  // namespace
}  // namespace ferry::detail
