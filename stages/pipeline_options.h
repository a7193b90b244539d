#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ferry/pipeline/cache_memory.h"
#include "ferry/pipeline/engine_options.h"

namespace ferry {

struct CollateOptions {
  /// Pad value of variable-length fields (converted to the field's dtype as torch::full would).
  double pad_value = 0.0;
  /// Per-field pad values, overriding pad_value.
  std::map<std::string, double, std::less<>> pad_values;
  /// A variable-length field `x` comes with `x` + suffix: an int64 [batch] tensor of lengths.
  std::string lengths_suffix = "_lengths";
  /// Fields delivered as a list of tensors, each sample's at its own shape (images of their own size,
  /// a sample's boxes), views of the batch's one buffer: Batch::list(). A field whose shape varies in
  /// more than its first size must be one.
  std::vector<std::string> lists;
  /// Fields that stay on the host (ids, strings as bytes): collated into CPU tensors of their own,
  /// not copied to the device.
  std::vector<std::string> host;
};

/// How the completion thread waits for a batch's copy (Note [event polling] in event_wait_stage.h).
enum class WaitMode {
  kPoll,  // yield for ~100 us, then sleep in short steps: no core burnt while the link is busy
  kSpin,  // yield until done: the lowest latency, one core busy for the whole run
};

struct TransferOptions {
  static constexpr size_t kMaxAlignment = 4096;
  static constexpr size_t kMinChunkBytes = 4096;
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

/// Everything the standard pipeline needs to know (make_pipeline(), stages/standard_pipeline.h): what the
/// engine needs (EngineOptions) and what its stages need. A YAML config (assembly/config.h) fills the same
/// struct.
struct PipelineOptions : EngineOptions {
  /// Decoder per field name, replacing the one the source names (see DecoderRegistry).
  std::map<std::string, std::string, std::less<>> decoders;
  CollateOptions collate;
  TransferOptions transfer;
  CacheOptions cache;
  AugmentOptions augment;

  /// The engine's problems, then the stages' options out of range or that do not go together. Pure.
  std::vector<OptionProblem> problems() const;
  /// Throws ferry::Error naming the first of problems().
  void check() const;
};

}  // namespace ferry
