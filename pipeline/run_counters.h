#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/pipeline/batch_marks.h"
#include "ferry/pipeline/occupancy.h"
#include "ferry/pipeline/pipeline_stats.h"

namespace ferry {
class PinnedPool;
}  // namespace ferry

namespace ferry::detail {

/// Note [stats]
/// ~~~~~~~~~~~~
/// stats() may be called from any thread while the pipeline runs, so everything it reads is an
/// atomic counter or sits behind a short lock; the hot path pays a few relaxed atomic adds and clock
/// reads per batch (two per sample in decode), nothing per byte. Each stage's time is busy (timed
/// around its body), blocked downstream, or waiting upstream (the rest of wall x threads):
///   * pack is blocked while the pinned pool makes it wait for a slab: the pool times its waits,
///     and they are moved out of pack's body time;
///   * event-wait is blocked while pushing a batch into a full ready queue (handing a batch over
///     otherwise counts as its work);
///   * the planner is blocked while every token is held by a batch the consumer has not taken, it
///     is not planning and has more to plan (Note [occupancy] in pipeline_graph.h).
/// No other stage can block: every other successor buffers without bound (the tokens bound them).

/// The stages whose work PipelineGraph times, in the order the report lists them.
enum StageId { kDecode, kCollate, kPack, kH2D, kEventWait, kStageCount };

/// The legs of a batch's way to the consumer (Note [batch path] in pipeline_stats.h), in its order.
enum BatchLeg {
  kToCollated,
  kToPack,
  kPacking,
  kToH2D,
  kSubmitting,
  kToEventWait,
  kEventWaiting,
  kToConsumer,
  kBatchLegCount
};

/// What PipelineGraph counts while it runs, and the PipelineStats made from it (Note [stats]).
/// Written by the graph's nodes, its completion thread and the consumer; snapshot() from any thread:
/// every count is an atomic or sits behind a short lock of its own. Allocates only to list skipped
/// samples.
class RunCounters {
 public:
  struct StageCounter {
    std::atomic<uint64_t> items{0};     // body runs
    std::atomic<uint64_t> not_out{0};   // runs that failed or were cut short by shutdown (rare)
    std::atomic<uint64_t> units_in{0};  // collate: samples in the batches it ran on
    std::atomic<uint64_t> busy_ns{0};
    std::atomic<uint64_t> blocked_ns{0};  // event-wait: pushing into a full ready queue
  };

  /// What snapshot() needs from the graph besides the counts.
  struct Setting {
    uint64_t run_ns = 0;  // the run so far, or up to its end
    std::string device;
    size_t decode_threads = 0;
    size_t prefetch = 0;
    std::array<std::string_view, kStageCount> stage_names;
    const PinnedPool* pool = nullptr;  // may be null
  };

  explicit RunCounters(size_t prefetch) : in_flight(prefetch), ready(prefetch) {}

  std::array<StageCounter, kStageCount> stages;
  // The planner: written only by the (serial) source node body.
  std::atomic<uint64_t> planned_batches{0};
  std::atomic<uint64_t> planned_samples{0};
  std::atomic<uint64_t> planning_ns{0};
  // The split node's waits for a plan's slab (Note [placing samples]): pool waits that are not pack's.
  std::atomic<uint64_t> split_slab_wait_ns{0};
  // Field bytes the decode threads copied into slabs (Note [placing samples]).
  std::atomic<uint64_t> placed_bytes{0};
  Occupancy in_flight;  // batches planned, not yet taken: Note [occupancy] in pipeline_graph.h
  Occupancy ready;      // batches pushed towards the consumer, not yet taken
  // The consumer.
  std::atomic<uint64_t> delivered_batches{0};
  // The first batch handed over: its samples (stored first, by the one consumer thread that wins) and
  // when (run time; 0 until then).
  std::atomic<uint64_t> first_batch_samples{0};
  std::atomic<uint64_t> first_batch_ns{0};
  std::atomic<uint64_t> delivered_samples{0};
  std::atomic<uint64_t> delivered_bytes{0};
  std::atomic<uint64_t> consumer_wait_ns{0};
  std::atomic<uint64_t> consumer_waits{0};  // next() calls that found no batch ready
  // Note [batch path]: each leg's time summed over the batches taken, and their count.
  std::array<std::atomic<uint64_t>, kBatchLegCount> leg_ns{};
  std::atomic<uint64_t> timed_batches{0};

  /// The consumer took a batch at `taken_ns` that passed `marks`: adds its legs. A batch whose way was
  /// not stamped whole is left out. Thread-safe.
  void add_batch_path(const BatchMarks& marks, uint64_t taken_ns);

  /// on_error: skip. Counts `skipped` and lists it among the first PipelineStats::kMaxListedSkips;
  /// returns the count so far (1 for the first). Thread-safe.
  uint64_t add_skipped(const SkippedSample& skipped);

  /// The stats of the run so far. Every count is read once; those of one stage so that out <= in.
  PipelineStats snapshot(const Setting& setting) const;

 private:
  mutable std::mutex skipped_mutex_;
  uint64_t skipped_count_ = 0;          // guarded by skipped_mutex_
  std::vector<SkippedSample> skipped_;  // guarded by skipped_mutex_
};

}  // namespace ferry::detail
