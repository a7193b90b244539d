#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/pipeline/batch.h"
#include "ferry/pipeline/batch_layout.h"
#include "ferry/pipeline/batch_marks.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/pinned_lease.h"
#include "ferry/pipeline/pipeline_state.h"
#include "ferry/pipeline/pipeline_stats.h"

namespace ferry {

/// One batch to make: which samples, in which order. The source node creates plans serially; the
/// engine numbers them. Markers (end of stream, a planning error, the end of an epoch) travel the
/// same path as batches so that they reach collate and the consumer in order, after every batch
/// planned before them.
struct BatchPlan {
  /// kEpochEnd: planned after an epoch's last plan when batches are re-cut from the samples left
  /// (on_error: skip): collate then knows that no more samples of the epoch come, and delivers what
  /// it holds back (Note [refilling batches] in batch_cutter.cpp).
  enum class Kind { kSamples, kEnd, kError, kEpochEnd };
  Kind kind = Kind::kSamples;
  uint64_t sequence = 0;    // 0, 1, 2, ... over the whole run
  uint64_t planned_ns = 0;  // when it was made (since the pipeline's start): Note [batch path]
  uint64_t epoch = 0;
  uint64_t index = 0;  // within its epoch
  /// The first sample's position in the epoch's order (sampler position); the rest follow on.
  uint64_t first_position = 0;
  /// No sample of this epoch is planned after this plan's.
  bool last_of_epoch = false;
  /// kEpochEnd: another epoch follows, over the same samples (Sampler::same_samples_every_epoch()), so
  /// an epoch that made no batch means a run that never will (Note [refilling batches]).
  bool same_samples_follow = false;
  std::vector<uint64_t> sample_indices;
  std::optional<Error> error;  // kError

  /// Sample slots this plan occupies in the per-sample part of the graph (a marker occupies one).
  size_t slots() const noexcept { return kind == Kind::kSamples ? sample_indices.size() : 1; }
  ErrorContext where(std::string stage) const { return ErrorContext{std::move(stage), std::nullopt, epoch, index}; }
};

/// Work a sample stage left for its group's batched call (SampleStage::run_pending()), or read for the
/// sample ahead of run() (SampleStage::prepare()): what it holds, the stage alone knows (the standard
/// decode stage's: a JPEG for the GPU decoder, Note [GPU JPEG decode] in io/decoders/nvjpeg_decoder.h; a
/// sample a worker process made). The engine only carries it between the stage's calls.
struct PendingWork {
  virtual ~PendingWork() = default;
};

/// A plan's staging slab, leased before its samples are decoded, and where each of the batch's leading
/// fixed-size fields lies in it: the decode threads copy those fields of each sample straight into their
/// slots (Note [placing samples] in pipeline/sample_placer.h). Shared by the plan's sample groups; the
/// lease moves to the plan's batch when collate cuts it.
struct PlacedSlab {
  /// Fields a sample may place: SampleWork::placed has a bit for each.
  static constexpr size_t kMaxFields = 64;
  struct Slot {
    size_t offset = 0;        // the field's first byte in the slab
    size_t sample_bytes = 0;  // one sample's bytes: sample p's start at offset + p * sample_bytes
  };
  PinnedLease lease;
  std::byte* data = nullptr;  // the lease's slab, kept here after the lease moves on
  size_t samples = 0;         // the plan's
  std::vector<Slot> fields;   // for the source's first fields.size() fields
};

/// One sample on its way through decode. Owned by one graph node at a time.
struct SampleWork {
  std::shared_ptr<const BatchPlan> plan;
  uint32_t position = 0;           // within the batch
  std::vector<at::Tensor> fields;  // decoded, in the source's field order (empty when cached)
  /// The sample is in the dataset cache (Note [dataset cache] in dataset_cache.h): not read, not
  /// decoded; its bytes are gathered on the device.
  bool cached = false;
  std::string key;  // the source's name for the sample, once read (for skip reports)
  std::optional<Error> error;
  /// Note [replacing skipped samples]: the sample read instead of the planned one, the samples
  /// skipped on the way (collate records them, in order), and whether the search gave up (the run
  /// fails then: skipping would leave this rank's epoch shorter).
  std::optional<uint64_t> replacement;
  std::vector<SkippedSample> skipped;
  bool unskippable = false;
  /// The split node routed this sample to the stage's batched GPU path (SampleStage::gpu_share()); the stage
  /// leaves what it decodes there in `pending` for its group's batched call, which fills `fields`.
  bool on_gpu = false;
  std::vector<std::unique_ptr<PendingWork>> pending;
  /// What the stage read of this sample ahead of run(), with its group's others (SampleStage::prepare()).
  std::unique_ptr<PendingWork> prepared;
  /// Note [placing samples]: the plan's slab (null: pack copies every field), and the fields whose bytes
  /// the decode thread copied into it (bit f for field f), their tensors dropped from `fields`.
  PlacedSlab* slab = nullptr;
  uint64_t placed = 0;
  /// The pipeline's stop flag: a stage that waits on something outside the pipeline (a worker process)
  /// watches it, so that closing never waits for that. Null in stages run on their own (tests).
  const std::atomic<bool>* stop = nullptr;

  bool is_placed(size_t field) const noexcept {
    return field < PlacedSlab::kMaxFields && ((placed >> field) & 1U) != 0;
  }
  bool is_marker() const noexcept { return plan->kind != BatchPlan::Kind::kSamples; }
  /// The source index read: the planned sample's, or its replacement's.
  uint64_t index() const { return replacement ? *replacement : plan->sample_indices.at(position); }
  /// The planned sample's place in its epoch's order.
  uint64_t epoch_position() const noexcept { return plan->first_position + position; }
};

/// Samples of one plan, consecutive in it, decoded by one task (Note [sample groups] in
/// pipeline_graph.cpp). The split node numbers groups 0, 1, 2, ... over the run. A group costs two
/// allocations however many samples it holds; collate hands each sample on as a pointer that shares the
/// group's ownership (never stored in the group itself, which would keep it alive forever).
struct SampleGroup {
  uint64_t sequence = 0;
  // Routed to the GPU decoder (Note [GPU JPEG decode]): by the split node under `gpu`, by the decode node
  // when the task starts under `auto` (gpu_candidate). Set once: a sample's own on_gpu turns false when a
  // CPU-decoded replacement takes its place, the group's does not.
  bool on_gpu = false;
  bool gpu_candidate = false;        // `auto`: decoded on the GPU if it has room when the task starts
  std::vector<SampleWork> samples;   // in plan order
  std::shared_ptr<PlacedSlab> slab;  // the plan's, shared by its groups (Note [placing samples]); may be null
};

/// One item on its way from collate to the consumer: a batch, or a marker (the end, an error, or a
/// token to give back: Note [refilling batches] in batch_cutter.cpp). Each stage fills its part; a
/// stage that fails sets `error` and later stages pass the work on untouched, so the error reaches
/// the consumer in order. Owned by one node (or the completion thread) at a time.
struct BatchWork {
  enum class Kind {
    kBatch,
    kEnd,
    kError,
    kToken,  // nothing to deliver (a plan whose samples went to other batches, or were all skipped):
             // the completion thread gives its token back, in order
  };
  Kind kind = Kind::kBatch;
  uint64_t sequence = 0;  // collate numbers everything it emits 0, 1, 2, ...; the completion thread checks
  BatchInfo info;         // kBatch: which batch (delivered numbering) and which samples
  BatchCursor next;       // kBatch: where the batch after this one starts (for PipelineState)
  std::vector<std::shared_ptr<SampleWork>> samples;  // collate input, in batch order
  BatchLayout layout;                                // collate
  PinnedLease slab;                                  // pack: the staging slab
  std::vector<CopyChunk> chunks;                     // pack: one copy each
  std::vector<at::Tensor> direct_sources;            // pack: pinned tensors copied from in place (h2d hands
                                                     // them to the slab's lease)
  /// pack: samples' fields already on the device (decoded there: Note [GPU JPEG decode]) and their
  /// offsets in the batch; h2d copies them on the device and hands them to the slab's lease too.
  std::vector<std::pair<size_t, at::Tensor>> device_sources;
  Batch batch;  // h2d: the delivered batch (device views)
  std::optional<Error> error;
  std::exception_ptr prepare_error;  // the next stage's prepare() failed: thrown at that stage's turn
  BatchMarks marks;                  // kBatch: when it passed each point (Note [batch path] in pipeline_stats.h)

  bool is_marker() const noexcept { return kind != Kind::kBatch; }
  ErrorContext where(std::string stage) const {
    return ErrorContext{std::move(stage), std::nullopt, info.epoch, info.index};
  }
};

}  // namespace ferry
