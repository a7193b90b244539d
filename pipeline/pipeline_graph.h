#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <oneapi/tbb/flow_graph.h>

#include "ferry/pipeline/auto_decode_choice.h"
#include "ferry/pipeline/batch.h"
#include "ferry/pipeline/batch_cutter.h"
#include "ferry/pipeline/bounded_queue.h"
#include "ferry/pipeline/engine_options.h"
#include "ferry/pipeline/pipeline_stats.h"
#include "ferry/pipeline/run_counters.h"
#include "ferry/pipeline/shared_arena.h"
#include "ferry/pipeline/stage.h"
#include "ferry/pipeline/trace.h"

namespace ferry::detail {

/// The engine behind Pipeline: owns the oneTBB flow graph, the completion thread and the queues,
/// and runs a StageSet. Built and started by its constructor; stopped and joined by its destructor.
///
///   source ─► tokens ─► split ─► decode ×N ─► reorder ─► collate ─► pack ─► h2d ─┐
///   (plans)  (limiter)  (samples)                (sequencer)                        │ in_flight_
///                 ▲                                                                  ▼
///                 └──────── consumer pops a batch ◄── ready_ ◄── event-wait (completion thread)
///
/// Note [tokens]
/// ~~~~~~~~~~~~~
/// A limiter_node admits at most `prefetch` plans past the source; the consumer gives a token back
/// when it takes a batch (the completion thread, for a plan that completed no batch: Note [refilling
/// batches] in batch_cutter.cpp). So at most `prefetch` batches exist between planning and the consumer's
/// hands, which bounds every buffer on the way: the in-flight and ready queues have room for all of
/// them (plus the end marker), so no push into them ever waits, and the pinned pool has at least
/// `prefetch` slabs, so pack (or the split node, which leases a plan's slab: Note [placing samples] in
/// sample_placer.h) always finds one. No TBB worker ever blocks on a queue or the pool; only
/// the completion thread (ferry's own) waits, on CUDA events.
///
/// Order: the sequencer puts samples back in plan order; after it every node is serial and forwards
/// in order (Note [order between serial nodes] in the .cpp); the completion thread checks it.
///
/// Note [in-band errors and markers]
/// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
/// Node bodies never throw. A stage's exception becomes the work item's `error` (with the stage and
/// the sample or batch named) and travels on in order; later stages pass it untouched. The consumer
/// thus receives every batch planned before the failing one, then the error. The end of the run is a
/// marker plan that travels the same way, so it arrives after the last batch. After a failure the
/// source stops planning and everything still in flight is dropped at shutdown.
///
/// Note [shutdown]
/// ~~~~~~~~~~~~~~~
/// close() sets `stop_` and closes both queues: a consumer blocked in next() wakes, the completion
/// thread leaves its event wait (it polls), node bodies return at once. The destructor then waits
/// for consumers to leave next(), joins the completion thread, cancels the graph and waits for the
/// tasks already running (at most one sample decode each). Work items dropped on the way return their
/// slabs through their leases; a slab whose copy may still run returns only after its event.
///
/// Note [occupancy]
/// ~~~~~~~~~~~~~~~~
/// Two counts of batches are integrated over time: planned and not yet taken by the consumer
/// (in flight), and pushed towards the consumer and not yet taken (ready). Each changes once per
/// batch at each end, under a small mutex of its own. The count of in-flight batches can reach
/// prefetch + 1: oneTBB's input_node sometimes makes its next plan before the limiter can admit it
/// and holds it until a token is free (when the limiter has last pulled a plan instead, the node
/// waits unplanned). Either way all tokens are in use while the count is at least prefetch, so that
/// is the planner's blocked time, minus the time it spends planning meanwhile; the reported
/// occupancy is capped at prefetch: batches holding a token. A ready batch is counted from just
/// before its push, so the count never goes below the queue's true size when the consumer pops at once.
class PipelineGraph {
 public:
  /// Runs in `arena` when given (a PipelineGroup's, shared with the other devices' pipelines), else in
  /// an arena of its own of arena_slots() threads.
  PipelineGraph(StageSet stages, const EngineOptions& options, std::shared_ptr<SharedArena> arena = nullptr);
  ~PipelineGraph();
  PipelineGraph(const PipelineGraph&) = delete;
  PipelineGraph& operator=(const PipelineGraph&) = delete;

  /// The next batch, ready on the calling thread's current CUDA stream; nullopt at the end of the
  /// run or after close(). Rethrows a stage's ferry::Error (and again on every later call). Blocks,
  /// for at most `timeout` when it is not negative: then nullopt with *timed_out set.
  std::optional<Batch> next(std::chrono::microseconds timeout = std::chrono::microseconds(-1),
                            bool* timed_out = nullptr);
  /// Stops the pipeline: wakes blocked next() calls (which return nullopt). Thread-safe, idempotent.
  void close() noexcept;
  PipelineStats stats() const;
  /// The decode stage, for what it knows of the source (SampleStage::sample_key(), class_names()).
  const SampleStage& decode_stage() const noexcept { return *stages_.decode; }
  /// Pipeline::cache_to().
  void cache_to(int device);
  /// The last batch handed to the consumer (its sequence, epoch and index), if any. Thread-safe.
  struct Delivered {
    uint64_t sequence = 0;
    uint64_t epoch = 0;
    uint64_t index = 0;
    BatchCursor next;  // where the batch after it starts
  };
  std::optional<Delivered> last_delivered() const;
  /// The batch source's BatchSource::consumed_before(). Thread-safe.
  std::optional<uint64_t> consumed_before(const BatchCursor& cursor) const {
    return stages_.batches->consumed_before(cursor.epoch, cursor.position);
  }
  /// The arena threads a pipeline needs: `decode_threads` decode tasks, `gpu_groups` tasks waiting on the
  /// GPU decoder (SampleStage::gpu_groups()) and the serial nodes.
  static size_t arena_slots(size_t decode_threads, size_t gpu_groups) noexcept;

 private:
  using PlanPtr = std::shared_ptr<const BatchPlan>;
  using SamplePtr = std::shared_ptr<SampleWork>;
  using WorkPtr = std::shared_ptr<BatchWork>;
  using GroupPtr = std::shared_ptr<SampleGroup>;

  struct Delivery {
    enum class Kind { kBatch, kEnd, kError };
    Kind kind = Kind::kEnd;
    Batch batch;
    std::optional<Error> error;
    BatchCursor next;  // kBatch: where the batch after it starts
    BatchMarks marks;  // kBatch: Note [batch path] (deliver() stamps `delivered`)
  };
  struct Span {  // when a stage's body started and ended (now_ns())
    uint64_t start_ns = 0;
    uint64_t end_ns = 0;
  };

  struct Nodes;  // the flow graph's nodes (pipeline_graph.cpp)

  PlanPtr plan_next(tbb::flow_control& control);
  /// Split node: cuts a plan's samples into groups (Note [sample groups] in the .cpp) and puts each.
  template <typename Put>
  void split(const PlanPtr& plan, Put&& put);
  /// How many samples a group of a plan of `samples` gets.
  size_t group_size(size_t samples) const;
  static constexpr uint64_t kGroupWarmupSamples = 64;  // decoded before groups grow past one sample
  static constexpr uint64_t kGroupTargetNs = 50'000;
  void decode(SampleWork& sample);
  /// The decode stage's prepare() for a CPU group's samples, where it reads groups (SampleStage::prepare()).
  void prepare(SampleGroup& group);
  /// Decode node: where the group is decoded (auto_choice_ for a GPU candidate), then decode_samples() and
  /// decode_pending().
  void decode_group(SampleGroup& group);
  /// decode() of each sample of `group`; a GPU group's samples on several threads at once.
  void decode_samples(SampleGroup& group);
  /// Decode node, after decode() of each sample of `group`: the GPU part (Note [GPU JPEG decode] in
  /// io/decoders/nvjpeg_decoder.h), one batched call for the group's pending fields. `started_ns`: when
  /// the group's task began (now_ns()), for the report's gpu_group_seconds.
  void decode_pending(SampleGroup& group, uint64_t started_ns);
  /// Images of a GPU-bound group: enough for the hardware to work on many at once (bench/jpeg_decode on
  /// an H200, 4 callers: 65k images/s in batches of 64, 68k in batches of 256), few enough that a plan
  /// makes several groups, which the GPU's decoding states take on at once while the next ones are read.
  /// With one group a plan, `gpu` decoded 44k images/s at prefetch 4 (ImageNet recipe, 256 x 256).
  static constexpr size_t kGpuGroup = 64;
  /// Collate node: hands the sample to the cutter, collates the batches it cuts and appends every item
  /// to `out` (Note [refilling batches] in batch_cutter.cpp).
  void collect(SamplePtr sample, std::vector<WorkPtr>& out);
  void run_batch_stage(StageId id, BatchWork& work);
  /// Frees a packed batch's decoded samples on another thread: Note [releasing samples] in the .cpp.
  void release(std::vector<SamplePtr>&& samples);
  void submit(WorkPtr work);
  void completion_loop();
  void deliver(Delivery delivery);
  bool skip(const BatchWork& work) const noexcept;
  /// Decode node: copies a decoded sample's placeable fields into the plan's slab (Note [placing samples]).
  void place(SampleWork& sample);
  /// A batch cut whole from one plan takes the slab its samples were placed in (Note [placing samples]).
  /// Collate node only.
  void take_placed_slab(BatchWork& work);
  /// on_error: skip. Counts, lists and logs a sample whose read or decode failed. Collate node only.
  void record_skipped(const SkippedSample& skipped);
  /// Decode node, skip_replaces: reads the epoch's next samples in place of the failed one.
  void replace(SampleWork& sample);
  /// Decode node, for a sample whose decode failed (sample.error set), on the CPU or on the GPU: drops
  /// its GPU work and, under skip_replaces, decodes a replacement here, on the CPU.
  void decode_failed(SampleWork& sample);
  /// An item of stage `id` that failed: it does not come out, and the run stops planning, except for a
  /// sample that on_error: skip drops.
  void count_failure(StageId id);
  static constexpr uint64_t kMaxReplacementTries = 100;
  /// A kToken item's token, given back by the completion thread (no batch will be taken).
  void return_token();
  uint64_t now_ns() const noexcept;  // since started_
  /// The run's length so far: up to its end once mark_ended() ran, else up to now.
  uint64_t run_ns() const noexcept;
  /// The run is over for the consumer (its end, an error, close()): stats stop the clock here.
  void mark_ended() noexcept;
  /// Runs `body`, timing it into counters_[id] (and into `span` when given); returns the exception it
  /// threw as a placed Error.
  template <typename Body>
  std::optional<Error> guarded(StageId id, const ErrorContext& where, Body&& body, Span* span = nullptr);
  /// Runs a node body or the completion loop; an exception escaping it (out of memory, a bug) fails
  /// the pipeline at once instead of leaving the consumer waiting for a batch that never comes.
  template <typename Body>
  void shielded(const char* where, Body&& body) noexcept;
  void fail_now(const char* where, std::exception_ptr error) noexcept;
  /// Note [trace]: the names of the track's spans, by TraceSpan.
  enum TraceSpan : uint8_t { kPlanSpan = kStageCount, kWaitSpan, kTraceSpanCount };
  std::vector<std::string> trace_span_names() const;
  /// Records span `span` (a StageId or a TraceSpan) of the batch `epoch`/`batch` when tracing.
  void trace_span(uint8_t span, uint64_t start_ns, uint64_t end_ns, uint64_t epoch, uint64_t batch, uint64_t samples,
                  const char* role) {
    if (trace_) trace_->span(track_, span, start_ns, end_ns, epoch, batch, samples, role);
  }
  void trace_count(Trace::Counter counter, Occupancy::Change change, const char* role) {
    if (trace_) trace_->count(track_, counter, change.at_ns, change.count, role);
  }
  /// The pinned slabs in use now, when tracing.
  void trace_slabs(const char* role);

  // Declaration order is destruction order in reverse: the stages (and the pool their leases
  // return to) outlive the graph and the queues holding work items.
  StageSet stages_;
  const size_t prefetch_;
  const size_t decode_threads_;
  const size_t decode_threads_shared_by_;  // PipelineStats::decode_threads_shared_by
  const size_t gpu_groups_;                // SampleStage::gpu_groups(): decode threads that wait on the GPU
  const bool wide_groups_;                 // SampleStage::wide_groups()
  const size_t max_releasing_;             // Note [releasing samples]: batches' samples waiting to be freed
  const OnError on_error_;
  const bool replace_;  // on_error: skip with skip_replaces
  const std::string device_;
  const std::chrono::steady_clock::time_point started_;
  // Note [trace]: null without stats.trace; this pipeline's track in it. The spans' names (by StageId
  // and TraceSpan) name the profilers' ranges too, torch.profiler's as "ferry::<name>" (Note [profiler
  // ranges] in profiler_range.h).
  std::vector<std::string> span_names_;
  std::vector<std::string> torch_names_;
  std::shared_ptr<Trace> trace_;
  uint32_t track_ = 0;
  std::mutex trace_slabs_mutex_;  // slab counts read and timed in one order (trace_slabs())
  BatchCutter cutter_;            // touched only by the serial collate node

  std::atomic<bool> stop_{false};          // close() was called
  std::atomic<bool> failed_{false};        // a stage failed: plan no more
  std::atomic<bool> enough_{false};        // collate has emitted max_batches batches: plan no more
  std::atomic<int64_t> ended_ns_{-1};      // mark_ended(): when the run ended; -1 while it runs
  RunCounters run_;                        // what stats() reports: Note [stats] in run_counters.h
  std::atomic<uint64_t> gpu_group_ns_{0};  // GPU groups' task time, summed (the report's)
  AutoDecodeChoice auto_choice_;           // GpuShare::kAuto: Note [auto: the faster decoder]
  std::atomic<size_t> releasing_{0};       // release() tasks not yet done

  BoundedQueue<WorkPtr> in_flight_;  // h2d -> completion thread
  // The serial h2d node runs on any worker thread: push through one lane to keep batch order.
  BoundedQueue<WorkPtr>::Producer in_flight_lane_;
  BoundedQueue<Delivery> ready_;  // completion thread -> consumer

  // Source node state: touched only by the input_node body, which oneTBB runs serially.
  uint64_t next_batch_sequence_ = 0;
  uint64_t next_group_sequence_ = 0;  // split node (serial too)
  bool planned_last_ = false;

  // Consumer side.
  mutable std::mutex consumer_mutex_;
  std::optional<Error> sticky_error_;
  std::optional<Delivered> last_delivered_;  // guarded by consumer_mutex_
  bool finished_ = false;
  std::atomic<int> consumers_inside_{0};
  std::atomic<bool> resumed_wait_{false};  // the last next() timed out: the next call continues its wait

  std::shared_ptr<SharedArena> arena_;
  std::unique_ptr<tbb::flow::graph> graph_;
  std::unique_ptr<Nodes> nodes_;
  std::thread completion_;
};

}  // namespace ferry::detail
