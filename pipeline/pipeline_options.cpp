#include "ferry/pipeline/pipeline_options.h"

#include <algorithm>
#include <thread>

#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

bool power_of_two(size_t n) { return n != 0 && (n & (n - 1)) == 0; }

void require(bool ok, const std::string& key, const std::string& expected, const std::string& found) {
  if (!ok) throw Error("invalid option " + key + ": expected " + expected + ", found " + found);
}

}  // namespace

std::optional<size_t> PoolOptions::slab_size(std::optional<size_t> largest_batch) const noexcept {
  if (slab_bytes != 0) return slab_bytes;
  if (!largest_batch) return std::nullopt;
  return std::max(*largest_batch, kMinSlabBytes);
}

const char* cache_memory_name(CacheMemory memory) noexcept {
  switch (memory) {
    case CacheMemory::kOff: return "off";
    case CacheMemory::kManaged: return "managed";
    case CacheMemory::kDevice: return "device";
    case CacheMemory::kHost: return "host";
  }
  return "unknown";
}

const char* augment_dtype_name(AugmentOptions::DType dtype) noexcept {
  switch (dtype) {
    case AugmentOptions::DType::kFloat32: return "float32";
    case AugmentOptions::DType::kFloat16: return "float16";
    case AugmentOptions::DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

const char* augment_layout_name(AugmentOptions::Layout layout) noexcept {
  return layout == AugmentOptions::Layout::kNCHW ? "NCHW" : "NHWC";
}

size_t PipelineOptions::resolved_decode_threads() const {
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t share = std::max<size_t>(1, local_processes);
  const size_t threads = decode_threads != 0 ? decode_threads : std::max<size_t>(1, (hardware > 2 ? hardware - 2 : 1) / share);
  // Samples in flight: the batches the tokens allow (prefetch), each batch_size samples at most.
  const size_t in_flight = std::max<size_t>(prefetch, 1) * std::max<size_t>(batch_size, 1);
  return std::min(threads, in_flight);
}

void PipelineOptions::check() const {
  require(batch_size >= 1, "batch_size", "at least 1", std::to_string(batch_size));
  require(batch_size <= (size_t{1} << 24), "batch_size", "at most 16777216", std::to_string(batch_size));
  require(epochs >= 1, "epochs", "at least 1", std::to_string(epochs));
  require(prefetch >= 1 && prefetch <= 1024, "prefetch", "1..1024", std::to_string(prefetch));
  require(decode_threads <= 1024, "decode_threads", "0 (auto) or 1..1024", std::to_string(decode_threads));
  require(pool.slab_count == 0 || pool.slab_count >= prefetch, "pool.slab_count",
          "0 (auto) or at least prefetch (" + std::to_string(prefetch) + "): every batch in flight may hold a slab",
          std::to_string(pool.slab_count));
  require(power_of_two(transfer.min_alignment) && transfer.min_alignment <= 4096, "transfer.min_alignment",
          "a power of two up to 4096", std::to_string(transfer.min_alignment));
  require(transfer.max_chunk_bytes >= 4096, "transfer.max_chunk_bytes", "at least 4096",
          std::to_string(transfer.max_chunk_bytes));
  require(!collate.lengths_suffix.empty(), "collate.lengths_suffix", "a non-empty suffix", "\"\"");
  if (augment.enabled()) {
    const std::string size = std::to_string(augment.height) + " x " + std::to_string(augment.width);
    require((augment.height == 0) == (augment.width == 0) && augment.height >= 0 && augment.width >= 0 &&
                augment.height <= 65535 && augment.width <= 65535,
            "augment.random_resized_crop.size", "[height, width], each 1..65535", size);
    require(augment.scale_min > 0 && augment.scale_min <= augment.scale_max && augment.scale_max <= 1,
            "augment.random_resized_crop.scale", "[min, max] with 0 < min <= max <= 1",
            std::to_string(augment.scale_min) + ", " + std::to_string(augment.scale_max));
    require(augment.ratio_min > 0 && augment.ratio_min <= augment.ratio_max, "augment.random_resized_crop.ratio",
            "[min, max] with 0 < min <= max", std::to_string(augment.ratio_min) + ", " + std::to_string(augment.ratio_max));
    require(augment.flip >= 0 && augment.flip <= 1, "augment.flip", "a probability in 0..1", std::to_string(augment.flip));
    for (double deviation : augment.std) {
      require(deviation > 0, "augment.normalize.std", "three values > 0", std::to_string(deviation));
    }
  }
}

}  // namespace ferry
