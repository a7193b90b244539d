#include "ferry/pipeline/run_counters.h"

#include <algorithm>

#include "ferry/pipeline/pinned_pool.h"

namespace ferry::detail {

uint64_t RunCounters::add_skipped(const SkippedSample& skipped) {
  // Counted and listed under one lock, so that a snapshot's count and list agree.
  std::lock_guard lock(skipped_mutex_);
  if (++skipped_count_ <= PipelineStats::kMaxListedSkips) skipped_.push_back(skipped);
  return skipped_count_;
}

void RunCounters::add_batch_path(const BatchMarks& marks, uint64_t taken_ns) {
  if (!marks.complete()) return;
  const std::array<uint64_t, kBatchLegCount + 1> points{marks.planned,    marks.collated,  marks.pack_start,
                                                        marks.pack_end,   marks.h2d_start, marks.h2d_end,
                                                        marks.wait_start, marks.delivered, taken_ns};
  for (size_t leg = 0; leg < kBatchLegCount; ++leg) {
    // One steady clock stamps every point, so they never go back; max() keeps a bug from wrapping around.
    leg_ns[leg].fetch_add(std::max(points[leg + 1], points[leg]) - points[leg], std::memory_order_relaxed);
  }
  // Release: a snapshot that sees the count sees the legs it covers (it may see a later batch's legs too).
  timed_batches.fetch_add(1, std::memory_order_release);
}

PipelineStats RunCounters::snapshot(const Setting& setting) const {
  PipelineStats stats;
  const uint64_t run = setting.run_ns;
  const double wall = static_cast<double>(run) * 1e-9;
  stats.device = setting.device;
  stats.decode_threads = setting.decode_threads;
  stats.prefetch = setting.prefetch;
  stats.elapsed_seconds = wall;
  stats.batches = delivered_batches.load(std::memory_order_relaxed);
  if (const uint64_t first = first_batch_ns.load(std::memory_order_acquire); first != 0) {
    stats.first_batch_seconds = static_cast<double>(first) * 1e-9;
    stats.first_batch_samples = first_batch_samples.load(std::memory_order_relaxed);
  }
  stats.samples = delivered_samples.load(std::memory_order_relaxed);
  stats.bytes = delivered_bytes.load(std::memory_order_relaxed);
  stats.consumer_wait_seconds = static_cast<double>(consumer_wait_ns.load(std::memory_order_relaxed)) * 1e-9;
  stats.consumer_waits = consumer_waits.load(std::memory_order_relaxed);
  stats.placed_bytes = placed_bytes.load(std::memory_order_relaxed);
  if (setting.pool != nullptr) stats.pool = setting.pool->stats();

  const Occupancy::Snapshot planned = in_flight.snapshot(run);
  stats.in_flight =
      OccupancyStats{planned.mean, planned.peak, setting.prefetch, static_cast<double>(planned.full_ns) * 1e-9};
  const Occupancy::Snapshot handed = ready.snapshot(run);
  stats.ready_queue =
      OccupancyStats{handed.mean, handed.peak, setting.prefetch, static_cast<double>(handed.full_ns) * 1e-9};
  stats.ready_queue_peak = handed.peak;

  StageStats& planner = stats.planner;
  planner.name = "plan";
  planner.threads = 1;
  planner.items =
      planned_batches.load(std::memory_order_acquire);  // before the samples: see PipelineGraph::plan_next()
  planner.items_out = planner.items;
  planner.items_in = planned_samples.load(std::memory_order_relaxed);
  planner.in_unit = "samples";
  planner.out_unit = "batches";
  planner.busy_seconds = static_cast<double>(planning_ns.load(std::memory_order_relaxed)) * 1e-9;
  planner.blocked_downstream_seconds = static_cast<double>(planned.blocked_ns) * 1e-9;
  planner.account_idle_time(wall);

  for (size_t id = 0; id < kStageCount; ++id) {
    const StageCounter& counter = stages[id];
    StageStats stage;
    stage.name = std::string(setting.stage_names[id]);
    stage.threads = id == kDecode ? setting.decode_threads : 1;
    const uint64_t not_out = counter.not_out.load(std::memory_order_acquire);  // first: see PipelineGraph::guarded()
    stage.items = counter.items.load(std::memory_order_acquire);  // before units_in: see PipelineGraph::guarded()
    stage.items_out = stage.items - std::min(not_out, stage.items);
    stage.items_in = id == kCollate ? counter.units_in.load(std::memory_order_relaxed) : stage.items;
    stage.in_unit = id == kDecode || id == kCollate ? "samples" : "batches";
    stage.out_unit = id == kDecode ? "samples" : "batches";
    stage.busy_seconds = static_cast<double>(counter.busy_ns.load(std::memory_order_relaxed)) * 1e-9;
    stage.blocked_downstream_seconds = static_cast<double>(counter.blocked_ns.load(std::memory_order_relaxed)) * 1e-9;
    if (id == kPack) {
      // Pack's body includes its waits for a slab; they are time blocked, not work (Note [stats]). The
      // pool's other waits are the split node's, for plans' slabs (Note [placing samples]).
      const double split_waits = static_cast<double>(split_slab_wait_ns.load(std::memory_order_relaxed)) * 1e-9;
      const double pack_waits = std::max(0.0, stats.pool.wait_seconds - split_waits);
      stage.blocked_downstream_seconds = pack_waits;
      stage.busy_seconds = std::max(0.0, stage.busy_seconds - pack_waits);
    }
    stage.account_idle_time(wall);
    stats.stages.push_back(std::move(stage));
  }
  // The legs after collate are named after the stages they lead to or run: "to pack", "pack", ...
  const std::string pack(setting.stage_names[kPack]), h2d(setting.stage_names[kH2D]),
      wait(setting.stage_names[kEventWait]);
  const std::array<std::string, kBatchLegCount> leg_names{
      "plan to collated", "to " + pack, pack, "to " + h2d, h2d, "to " + wait, wait, "to consumer"};
  stats.batch_path.batches = timed_batches.load(std::memory_order_acquire);  // first: see add_batch_path()
  for (size_t leg = 0; leg < kBatchLegCount; ++leg) {
    const bool waiting = leg == kToPack || leg == kToH2D || leg == kToEventWait || leg == kToConsumer;
    stats.batch_path.legs.push_back(BatchPathStats::Leg{
        leg_names[leg], waiting, static_cast<double>(leg_ns[leg].load(std::memory_order_relaxed)) * 1e-9});
  }
  {
    std::lock_guard lock(skipped_mutex_);
    stats.skipped_samples = skipped_count_;
    stats.skipped = skipped_;
  }
  return stats;
}

}  // namespace ferry::detail
