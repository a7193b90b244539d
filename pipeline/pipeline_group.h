#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "ferry/pipeline/batch_group.h"
#include "ferry/pipeline/next_iterator.h"
#include "ferry/pipeline/pipeline.h"

namespace ferry {

/// One process feeding several devices (`transfer.devices`): a pipeline per device, each with its own
/// pinned pool, copy stream, events and ready queue, all decoding on one shared pool of threads. Each
/// step hands out one batch per device, of the same epoch and index.
///
///   ferry::PipelineGroup group = ferry::make_pipeline_group(config);  // assembly/configured_pipeline.h
///   for (const ferry::BatchGroup& step : group) { ... step[d]["image"] ... }
///
/// Note [one process, several devices]
/// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
/// Device d of N in a process of rank r among W is rank r x N + d among W x N to the sampler (the
/// config layer sets that up): a step takes the next N x batch_size samples of the process's order and
/// each device gets every N-th of them, as N data-parallel ranks would, and on_error: skip replaces a
/// skipped sample (Note [replacing skipped samples]) so that every device keeps its number of batches.
/// The devices therefore stay in step; next() checks it and throws ferry::Error when they do not.
///
/// A step is taken device by device. A timeout (next_for), a failure or close() part-way keeps the
/// batches already taken, and state() counts them as not delivered: every device's state then points at
/// the same step, which a resumed group delivers whole.
///
/// Consumer side as Pipeline: next()/iteration from one thread at a time; close(), stats() and state()
/// from any thread.
struct PipelinePart;  // one device's stages and options (pipeline/advanced.h)

class PipelineGroup {
 public:
  PipelineGroup(PipelineGroup&&) noexcept;
  PipelineGroup& operator=(PipelineGroup&&) noexcept;
  /// Closes every device's pipeline first, then joins them one after another.
  ~PipelineGroup();

  /// Devices in the group.
  size_t size() const noexcept { return pipelines_.size(); }

  /// The next step, or nullopt at the end of the run (or after close()). Blocks until every device's
  /// batch is ready. Rethrows a device's ferry::Error (a stage's failure, naming the sample); throws
  /// ferry::Error when the devices are out of step.
  std::optional<BatchGroup> next();

  struct Next {
    std::optional<BatchGroup> step;
    bool timed_out = false;  // no whole step within the timeout; the batches taken so far are kept
  };
  /// As next(), waiting at most `timeout` (see Pipeline::next_for()).
  Next next_for(std::chrono::microseconds timeout);

  /// Stops every device's pipeline; a next() blocked on another thread returns nullopt. Thread-safe.
  void close();

  /// Each device's stats, in the group's device order; decode's threads are the shared pool's.
  std::vector<PipelineStats> stats() const;
  /// Each device's state, in device order: only whole steps count as delivered (Note [one process,
  /// several devices]). Resume with make_pipeline_group(config, source, states).
  std::vector<PipelineState> state() const;
  /// The `device`-th device's pipeline (its options, its stats). Throws ferry::Error out of range.
  const Pipeline& pipeline(size_t device) const;
  /// Pipeline::cache_to() for a group of one device; throws ferry::Error for several (each keeps its own).
  void cache_to(int device);

  /// Single-pass input iterator over the remaining steps; ++ calls next() (and may throw).
  using Iterator = NextIterator<PipelineGroup, BatchGroup>;
  Iterator begin() { return Iterator(this); }
  Iterator end() { return Iterator(); }

 private:
  // Made by make_pipeline_group() (assembly/configured_pipeline.h) through pipeline_group_from_parts()
  // (pipeline/advanced.h).
  friend PipelineGroup pipeline_group_from_parts(std::vector<PipelinePart> parts, size_t decode_threads);
  /// Starts one pipeline per part, their graphs in one arena of `decode_threads` decode threads, as one
  /// pipeline's (each device's decode may use all of them), plus the threads the GPU decoders keep
  /// waiting. Throws ferry::Error for no part, or a part's invalid options; nothing is left running.
  PipelineGroup(std::vector<PipelinePart> parts, size_t decode_threads);

  // A device's last batch of a whole step: where its state stands once the step is delivered.
  struct Delivered {
    uint64_t sequence = 0;  // in its pipeline's run
    uint64_t epoch = 0;
    uint64_t index = 0;
    BatchCursor next;  // where its next batch starts
  };
  // The whole group's consumer state, guarded by mutex_ (next() holds it only between its calls into the
  // pipelines, so that state() and stats() never wait for a batch).
  struct Progress {
    std::vector<std::optional<Batch>> taken;          // this step's batches taken so far
    std::vector<std::optional<Delivered>> delivered;  // each device's last batch of a whole step
    bool closed = false;                              // close() was called: a device's end is not the run's
  };

  // Throws: `device` ended its run (or, with `batch`, delivered it) out of step with `other`'s `others`.
  [[noreturn]] void out_of_step(size_t device, const Batch* batch, size_t other, const Batch& others) const;

  std::vector<Pipeline> pipelines_;
  size_t decode_threads_ = 0;  // the shared pool's
  std::unique_ptr<std::mutex> mutex_;
  std::unique_ptr<Progress> progress_;
};

}  // namespace ferry
