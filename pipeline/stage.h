#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/pipeline/dataset_cache.h"
#include "ferry/pipeline/pinned_pool.h"
#include "ferry/pipeline/sample_placer.h"
#include "ferry/pipeline/work_items.h"

namespace ferry {

/// Plans batches: which samples, in order. Called by the pipeline's source node, serially (never
/// from two threads at once). Returns nullopt when the run is over. The engine fills in the
/// plan's sequence numbers; the planner sets kind, epoch, index and sample_indices.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual std::optional<BatchPlan> next() = 0;
  /// The sample at `position` of `epoch`'s order, counting on past the epoch's end from its start;
  /// nullopt when this source cannot say. Needed to replace skipped samples (Note [replacing
  /// skipped samples] in pipeline_graph.cpp); unlike next(), called from the decode threads at once.
  virtual std::optional<uint64_t> sample_at(uint64_t epoch, uint64_t position) const {
    (void)epoch;
    (void)position;
    return std::nullopt;
  }
  /// Samples of `epoch`'s order that all ranks together took before this rank's `position`
  /// (Sampler::consumed_before), saved with the state; nullopt when this source cannot say.
  virtual std::optional<uint64_t> consumed_before(uint64_t epoch, uint64_t position) const {
    (void)epoch;
    (void)position;
    return std::nullopt;
  }
};

/// A stage that works on one sample at a time, called concurrently for different samples (up to
/// decode_threads at once). Throwing from run() fails that sample; the engine adds the stage name
/// and the sample's identity to the error.
class SampleStage {
 public:
  /// Which samples a stage decodes on the GPU (Note [GPU JPEG decode] in io/decoders/nvjpeg_decoder.h):
  /// none; every one the hardware can (kAll); or, under `auto`, the CPU's or the GPU's, whichever
  /// decodes faster (kAuto; Note [auto: the faster decoder] in pipeline/auto_decode_choice.h). The decode
  /// node routes samples accordingly (SampleWork::on_gpu).
  enum class GpuShare { kNone, kAll, kAuto };
  /// Where the GPU decoder stands: starting (it takes no images), ready (it does, some of its decoding
  /// states still warming up), or warm (its rate is what it will be).
  enum class GpuReadiness { kStarting, kReady, kWarm };

  virtual ~SampleStage() = default;
  virtual std::string_view name() const = 0;
  virtual void run(SampleWork& work) = 0;
  /// Whether it reads a group's samples best in one call (one round trip to a worker process), in
  /// prepare(): the engine then calls prepare() for each group it decodes on the CPU, and makes the groups
  /// as large as the decode threads allow (Note [sample groups] in pipeline_graph.cpp), not sized by time.
  virtual bool wide_groups() const { return false; }
  /// Where wide_groups(): called from a decode thread with a group's samples, before run() for each of
  /// them; reads them and leaves each in its SampleWork::prepared for run(). One sample's failure is run()'s
  /// to raise.
  virtual void prepare(const std::vector<SampleWork*>& samples) { (void)samples; }
  /// What user code run beside the stage's threads did so far (PipelineStats::user_code). Thread-safe.
  virtual std::vector<UserCodeStats> user_code() const { return {}; }
  /// What the source fetched (PipelineStats::remote); `used` false where it fetches nothing. Thread-safe.
  virtual RemoteDataStats remote_data() const { return {}; }
  /// A mixed source's parts and the samples each gave so far (PipelineStats::source_parts). Thread-safe.
  virtual std::vector<SourcePartStats> source_parts() const { return {}; }
  /// The key of sample `index` ("shard-0003.tar:000123", a file's path), without reading it: what a
  /// batch says it holds (Pipeline::sample_keys()). By default the index as text. Thread-safe.
  virtual std::string sample_key(uint64_t index) const { return std::to_string(index); }
  /// The names of the classes the samples' label field numbers, in label order; empty where there are
  /// none.
  virtual std::vector<std::string> class_names() const { return {}; }
  virtual GpuShare gpu_share() const { return GpuShare::kNone; }
  /// GPU groups in flight at once beside the CPU's (0 without GPU decoding): those in the decoder and
  /// those whose files are read meanwhile. The decode node gets as many threads more: a GPU group's thread
  /// mostly sleeps until the hardware is done.
  virtual size_t gpu_groups() const { return 0; }
  /// Under kAuto the GPU decoder starts in the background (the CPU decodes everything meanwhile).
  /// Thread-safe.
  virtual GpuReadiness gpu_readiness() const { return GpuReadiness::kStarting; }
  /// The GPU decoder's counts and times so far, for PipelineStats::gpu_decode (thread-safe; all zero
  /// without GPU decoding). gpu_group_seconds is the pipeline's to fill.
  virtual PipelineStats::GpuDecodeStats gpu_stats() const { return {}; }
  /// Decodes what run() left pending in `samples` (one group: one batched GPU call), filling their
  /// fields. Calls `failed(sample, error)` for each sample whose pending field could not be decoded
  /// anywhere. Called from a decode thread after run() for each of them; blocks until the GPU is done.
  virtual void run_pending(const std::vector<SampleWork*>& samples,
                           const std::function<void(SampleWork&, std::exception_ptr)>& failed) {
    (void)samples;
    (void)failed;
  }
};

/// A stage that works on one batch at a time, called serially, in batch order. `stop` turns true
/// when the pipeline shuts down; a stage that waits must watch it and return early (leaving the
/// work unfinished). Throwing from run() fails the batch.
class BatchStage {
 public:
  virtual ~BatchStage() = default;
  virtual std::string_view name() const = 0;
  virtual void run(BatchWork& work, const std::atomic<bool>& stop) = 0;
  /// The part of run()'s work that needs only what the stages before it produced, not its own previous
  /// batch: the engine calls it on the thread of the serial node before this stage's, right after that
  /// node's stage ran, in batch order (Note [work ahead] in pipeline_graph.cpp): one batch's prepare()
  /// runs while the batch before it is in run(), on another thread. run() must also work when it was not
  /// called, for any batch (a stage run outside the engine, or wrapped by one that does not forward it; a
  /// wrapper that forwards it does so for every batch). What it throws fails the batch at this stage's
  /// turn, as from run().
  virtual void prepare(BatchWork& work) { (void)work; }
};

/// Everything a Pipeline runs. The engine (pipeline/) only knows these interfaces; the standard
/// stages live in stages/ and make_pipeline() assembles them.
struct StageSet {
  std::unique_ptr<BatchSource> batches;
  std::unique_ptr<SampleStage> decode;
  std::unique_ptr<BatchStage> collate;     // samples -> layout
  std::unique_ptr<BatchStage> pack;        // layout -> packed staging slab
  std::unique_ptr<BatchStage> h2d;         // slab -> device buffer, copies queued
  std::unique_ptr<BatchStage> event_wait;  // runs on the pipeline's completion thread
  std::shared_ptr<PinnedPool> pool;        // for stats; the pack stage owns its use
  std::shared_ptr<DatasetCache> cache;     // may be null; for stats and cache_to(); the stages own its use
  /// May be null: pack copies every field. Else the decode threads copy the leading fixed-size fields
  /// into the slab that pack then uses (Note [placing samples]); it leases from `pool`.
  std::unique_ptr<SamplePlacer> placer;
};

}  // namespace ferry
