#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "ferry/pipeline/pipeline_state.h"

namespace ferry {

struct CollateOptions {
  /// Pad value of variable-length fields (converted to the field's dtype as torch::full would).
  double pad_value = 0.0;
  /// Per-field pad values, overriding pad_value.
  std::map<std::string, double, std::less<>> pad_values;
  /// A variable-length field `x` comes with `x` + suffix: an int64 [batch] tensor of lengths.
  std::string lengths_suffix = "_lengths";
};

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
  /// The slab size for batches of at most `largest_batch` bytes: slab_bytes when set, else the
  /// largest batch (at least kMinSlabBytes); nullopt when neither is known.
  std::optional<size_t> slab_size(std::optional<size_t> largest_batch) const noexcept;
  /// The slabs a pipeline with `prefetch` batches in flight gets: slab_count when set, else prefetch.
  size_t slabs(size_t prefetch) const noexcept { return slab_count != 0 ? slab_count : prefetch; }
};

/// How the completion thread waits for a batch's copy (Note [event polling] in event_wait_stage.h).
enum class WaitMode {
  kPoll,  // yield for ~100 us, then sleep in short steps: no core burnt while the link is busy
  kSpin,  // yield until done: the lowest latency, one core busy for the whole run
};

struct TransferOptions {
  /// Each cudaMemcpyAsync moves at most this many bytes of a packed batch.
  size_t max_chunk_bytes = size_t{32} << 20;
  /// Every packed field starts at a multiple of max(min_alignment, element size).
  size_t min_alignment = 16;
  /// Batches of at least this many bytes are packed (and, for CPU targets, copied) by several threads.
  size_t parallel_pack_bytes = size_t{1} << 20;
  /// A decoded tensor of at least this many bytes that is already in pinned memory is copied to the
  /// device straight from there, skipping the slab (0: never). Note [direct copies] in stages/pack_stage.cpp.
  size_t direct_copy_bytes = size_t{1} << 20;
  /// The copy stream's priority: high lets ferry's copies start ahead of other streams' queued work.
  bool high_priority_stream = false;
  WaitMode wait = WaitMode::kPoll;
};

/// Where a dataset cache keeps the decoded samples (Note [dataset cache] in pipeline/dataset_cache.h).
enum class CacheMemory {
  kOff,      // no cache: every epoch reads, decodes, packs and copies
  kManaged,  // CUDA managed memory on the delivery device: can move to the host and back (cache_to)
  kDevice,   // plain device memory on the delivery device
  kHost,     // host memory, for a pipeline that delivers to the CPU
};

/// "off", "managed", "device" or "host".
const char* cache_memory_name(CacheMemory memory) noexcept;

/// The dataset cache: the first time a sample is decoded its fields are kept, and later epochs build
/// their batches from the kept bytes with a gather (no read, decode, pack or host-to-device copy).
struct CacheOptions {
  CacheMemory memory = CacheMemory::kOff;
  /// Cap on the cache's bytes; 0: none. A cache that needs more than the device has free is refused
  /// before the start either way (Note [dataset cache]).
  size_t max_bytes = 0;

  bool enabled() const noexcept { return memory != CacheMemory::kOff; }
};

/// Training-ready images (Note [image augment] in stages/image_augment.h): once a batch's bytes are on
/// its device, one pass over the batch turns a uint8 [B, H, W, 3] field into random-resized crops,
/// flipped at random, scaled to [0, 1], normalized, in `dtype` and `layout`. Every random choice comes
/// from (seed, epoch, sample), so runs and resumes repeat exactly whatever the threads or the device.
struct AugmentOptions {
  enum class DType { kFloat32, kFloat16, kBFloat16 };
  enum class Layout { kNCHW, kNHWC };
  /// The image field to augment; "" : no augmentation.
  std::string field;
  /// random_resized_crop: on or off; the output's height and width (0: the image's own) and, as
  /// torchvision's RandomResizedCrop defines them, the range of the crop's share of the image's area
  /// and of its aspect ratio (width / height). Off: the whole image, not resized.
  bool random_resized_crop = false;
  int64_t height = 0;
  int64_t width = 0;
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  /// The probability that a sample is flipped horizontally.
  double flip = 0.0;
  /// normalize: (value / 255 - mean) / std per channel (RGB); off when `normalize` is false.
  bool normalize = false;
  std::array<double, 3> mean{0.0, 0.0, 0.0};
  std::array<double, 3> std{1.0, 1.0, 1.0};
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kNCHW;
  /// Seeds every draw (a config takes sampler.seed).
  uint64_t seed = 0;

  bool enabled() const noexcept { return !field.empty(); }
  bool crops() const noexcept { return random_resized_crop; }
};

/// "float32", "float16", "bfloat16"; "NCHW", "NHWC".
const char* augment_dtype_name(AugmentOptions::DType dtype) noexcept;
const char* augment_layout_name(AugmentOptions::Layout layout) noexcept;

/// What a sample that cannot be read or decoded does to the run.
enum class OnError {
  kFail,  // the consumer gets ferry::Error naming the sample, after every batch before it
  kSkip,  // the sample is dropped, counted and reported in the stats with its reason
};

/// Everything a standard pipeline needs to know; a YAML config (assembly/config.h) fills the same struct.
struct PipelineOptions {
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
  /// Decoder per field name, replacing the one the source names (see DecoderRegistry).
  std::map<std::string, std::string, std::less<>> decoders;
  OnError on_error = OnError::kFail;
  /// Under kSkip: replace a skipped sample with the next one of the epoch that reads (Note
  /// [replacing skipped samples]) instead of filling its batch from the samples after it. Epochs
  /// then keep their number of batches, which data-parallel ranks need to stay in step;
  /// make_pipeline() sets it when there are several ranks.
  bool skip_replaces = false;
  /// Under kSkip without skip_replaces, collate cuts batches from the samples left (Note
  /// [refilling batches]) and the planner plans for that.
  bool refills() const noexcept { return on_error == OnError::kSkip && !skip_replaces; }
  CollateOptions collate;
  PoolOptions pool;
  TransferOptions transfer;
  CacheOptions cache;
  AugmentOptions augment;

  /// decode_threads with 0 resolved, and at most prefetch x batch_size: no more samples than that
  /// are ever in flight, so more threads could never all be busy (1024 of them on a small run cost
  /// seconds of thread start-up and spinning, for nothing).
  size_t resolved_decode_threads() const;
  /// Throws ferry::Error naming the first option out of range (and what is allowed).
  void check() const;
};

}  // namespace ferry
