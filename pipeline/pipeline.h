#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/pipeline/batch.h"
#include "ferry/pipeline/engine_options.h"
#include "ferry/pipeline/next_iterator.h"
#include "ferry/pipeline/pipeline_state.h"
#include "ferry/pipeline/pipeline_stats.h"

namespace ferry {

namespace detail {
class PipelineGraph;
class SharedArena;
}  // namespace detail

struct StageSet;  // the stages a Pipeline runs (pipeline/advanced.h)

/// A running loader: plans batches, decodes samples on decode_threads threads, collates, packs
/// into pinned slabs, copies to the device and hands out GPU-resident batches in the sampler's
/// order, keeping `prefetch` batches in flight. It starts working as soon as it is constructed.
///
///   ferry::Pipeline pipeline = ferry::load_pipeline("train.yaml");  // or make_pipeline(source, options)
///   for (const ferry::Batch& batch : pipeline) { ... batch["image"] ... }
///
/// Consumer side: next()/iteration from one thread at a time (any thread); close() and stats() from
/// any thread. A stage's failure is rethrown by next() as ferry::Error naming the stage and the
/// sample, after every batch planned before the failing one was delivered.
///
/// Destruction at any moment (mid-epoch, batches unclaimed, a consumer blocked in next() that
/// close() woke first) stops the work, joins every thread and returns every pinned slab; it returns
/// as soon as the samples being decoded at that moment are done.
class Pipeline {
 public:
  Pipeline(Pipeline&&) noexcept;
  Pipeline& operator=(Pipeline&&) noexcept;
  ~Pipeline();

  /// The next batch, or nullopt at the end of the run (or after close()). Blocks until a batch is
  /// ready. The batch's tensors are safe to use on the calling thread's current CUDA stream.
  std::optional<Batch> next();

  /// What next_for() found.
  struct Next {
    std::optional<Batch> batch;  // the next batch, or nullopt: the end of the run, close(), or a timeout
    bool timed_out = false;      // no batch within the timeout; the run goes on: call again
  };
  /// As next(), waiting at most `timeout`: for a consumer that must also react to something else
  /// while it waits, e.g. the Python binding, which checks for Ctrl-C between calls. A wait taken
  /// up again by the next call counts once in the stats.
  Next next_for(std::chrono::microseconds timeout);

  /// Stops the pipeline early; a next() blocked on another thread returns nullopt. Thread-safe.
  void close();

  PipelineStats stats() const;
  /// Where each of `batch`'s samples came from, in batch order: the keys its source gives them
  /// ("shard-0003.tar:000123", a file's path below an image folder's root). Thread-safe.
  std::vector<std::string> sample_keys(const Batch& batch) const;
  /// The names of the classes the label field numbers, in label order (an image folder's class
  /// folders); empty where the source has none.
  std::vector<std::string> class_names() const;
  /// Moves the dataset cache (cache.memory: managed) to `device`, or to the host with -1, and returns
  /// once it is there: e.g. to the host while an evaluation needs the GPU's memory, then back. Its
  /// pointers stay the same and batches keep coming meanwhile (from the host, over the link, until it
  /// is back). Blocks while the bytes move. Thread-safe. Throws ferry::Error without a managed cache,
  /// or for another device (Note [dataset cache] in dataset_cache.h).
  void cache_to(int device);
  /// Where the run stands: a pipeline built with `options.first_batch = state().next_batch` and
  /// `options.start = state().next` (and the same order) delivers exactly the batches this one has
  /// not delivered yet. Thread-safe; taken
  /// between two next() calls it describes exactly the batches received so far.
  PipelineState state() const;
  const EngineOptions& options() const noexcept { return options_; }

  /// Single-pass input iterator over the remaining batches; ++ calls next() (and may throw).
  using Iterator = NextIterator<Pipeline, Batch>;
  Iterator begin() { return Iterator(this); }
  Iterator end() { return Iterator(); }

 private:
  // Made by make_pipeline() (stages/standard_pipeline.h) or load_pipeline() (assembly/configured_pipeline.h),
  // through pipeline_from_stages() (pipeline/advanced.h), or by a PipelineGroup.
  friend Pipeline pipeline_from_stages(StageSet stages, EngineOptions options);
  friend class PipelineGroup;
  /// Builds and starts a pipeline from its stages. Throws ferry::Error for invalid options or a missing
  /// stage; no thread is left behind.
  Pipeline(StageSet stages, EngineOptions options);
  /// A PipelineGroup's pipeline: its graph runs in the group's arena, beside the other devices'.
  Pipeline(StageSet stages, EngineOptions options, std::shared_ptr<detail::SharedArena> arena);

  EngineOptions options_;
  std::unique_ptr<detail::PipelineGraph> graph_;
};

}  // namespace ferry
