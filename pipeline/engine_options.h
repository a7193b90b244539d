#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ferry/pipeline/pipeline_state.h"

namespace ferry {

/// The pinned pool's size. One home for its rules (slab size, count, budget), which the config's checks,
/// make_pipeline() and PinnedPool share: PoolOptions::slab_size(), slabs() and
/// PinnedPool::footprint().
struct PoolOptions {
  /// Bytes per staging slab; a batch must fit in one. 0: the largest batch the source can make.
  size_t slab_bytes = 0;
  /// Number of slabs; 0: prefetch (each batch in flight holds at most one).
  size_t slab_count = 0;
  /// Cap on pinned bytes (PinnedPool::footprint() of the slabs); 0: none.
  size_t budget_bytes = 0;

  /// A slab is never smaller than this: tiny batches still get a sensible staging buffer.
  static constexpr size_t kMinSlabBytes = 4096;
  static constexpr size_t kMaxSlabCount = 65536;
  /// The slab size for batches of at most `largest_batch` bytes: slab_bytes when set, else the
  /// largest batch (at least kMinSlabBytes); nullopt when neither is known.
  std::optional<size_t> slab_size(std::optional<size_t> largest_batch) const noexcept;
  /// The slabs a pipeline with `prefetch` batches in flight gets: slab_count when set, else prefetch.
  size_t slabs(size_t prefetch) const noexcept { return slab_count != 0 ? slab_count : prefetch; }
};

/// What a sample that cannot be read or decoded does to the run.
enum class OnError {
  kFail,  // the consumer gets ferry::Error naming the sample, after every batch before it
  kSkip,  // the sample is dropped, counted and reported in the stats with its reason
};

/// An option out of its range: its name as a member of the options ("prefetch", "pool.slab_count"), what
/// was expected and what was found. A config names the same option by its YAML key (the config loader
/// maps one to the other).
struct OptionProblem {
  std::string option;
  std::string expected;
  std::string found;
};

/// What the engine (Pipeline, PipelineGroup) needs to know to plan, bound and deliver batches, whatever
/// the stages: the standard pipeline's options (PipelineOptions, stages/pipeline_options.h) add what its
/// stages need.
struct EngineOptions {
  static constexpr size_t kMaxBatchSize = size_t{1} << 24;
  static constexpr size_t kMaxPrefetch = 1024;
  static constexpr size_t kMaxDecodeThreads = 1024;

  size_t batch_size = 32;
  bool drop_last = false;  // drop a last, smaller batch of an epoch
  uint64_t epochs = 1;
  uint64_t max_batches = 0;  // stop after this many batches in all (0: run every epoch)
  /// Resume: start at this batch of the run (counted over all epochs); earlier ones were delivered
  /// by a previous run (PipelineState::next_batch).
  uint64_t first_batch = 0;
  /// Resume: where first_batch starts (PipelineState::next). Unset: at first_batch x batch_size over
  /// whole epochs, which is right unless the previous run skipped samples.
  std::optional<BatchCursor> start;
  /// What decides which samples each batch holds ("sampler.seed" -> "1234", ...), as the config layer
  /// sees it. Carried into PipelineState, so that a resume with another order is refused.
  std::map<std::string, std::string> order;
  /// Concurrent decode tasks; 0: the machine's hardware threads minus two (at least 1), divided among
  /// `local_processes`.
  size_t decode_threads = 0;
  /// Processes of one job on this machine that share its cores (torchrun's LOCAL_WORLD_SIZE; the config
  /// layer sets it): decode_threads 0 gives each its share.
  size_t local_processes = 1;
  /// Batches in flight, from planning to the consumer's hands: bounds memory and keeps the device fed.
  size_t prefetch = 3;
  /// "auto" (the first GPU if this build and machine have one, else the CPU), "cpu", "cuda", "cuda:N".
  std::string device = "auto";
  OnError on_error = OnError::kFail;
  /// Under kSkip: replace a skipped sample with the next one of the epoch that reads (Note
  /// [replacing skipped samples]) instead of filling its batch from the samples after it. Epochs
  /// then keep their number of batches, which data-parallel ranks need to stay in step;
  /// make_pipeline() sets it when there are several ranks.
  bool skip_replaces = false;
  PoolOptions pool;
  /// Writes the run as a Chrome trace-event file (Perfetto, chrome://tracing) to this path: every
  /// stage's work on every batch, the consumer's waits, queue depths, skipped samples (Note [trace] in
  /// pipeline/trace.h). Pipelines of one process naming the same file share it, a track each. "": none.
  std::string trace;

  /// Under kSkip without skip_replaces, collate cuts batches from the samples left (Note
  /// [refilling batches]) and the planner plans for that.
  bool refills() const noexcept { return on_error == OnError::kSkip && !skip_replaces; }
  /// decode_threads with 0 resolved, and at most prefetch x batch_size: no more samples than that
  /// are ever in flight, so more threads could never all be busy (1024 of them on a small run cost
  /// seconds of thread start-up and spinning, for nothing).
  size_t resolved_decode_threads() const;
  /// Every option out of range, or that does not go with another (slab_count below prefetch). Pure.
  std::vector<OptionProblem> problems() const;
  /// Throws ferry::Error naming the first of problems(): "invalid option prefetch: expected ...".
  void check() const;
};

/// Throws ferry::Error naming the first of `problems`, if any.
void throw_first(const std::vector<OptionProblem>& problems);

}  // namespace ferry
