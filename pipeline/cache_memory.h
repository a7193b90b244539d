#pragma once

namespace ferry {

/// Where a dataset cache keeps the decoded samples (Note [dataset cache] in pipeline/dataset_cache.h).
enum class CacheMemory {
  kOff,      // no cache: every epoch reads, decodes, packs and copies
  kManaged,  // CUDA managed memory on the delivery device: can move to the host and back (cache_to)
  kDevice,   // plain device memory on the delivery device
  kHost,     // host memory, for a pipeline that delivers to the CPU
};

/// "off", "managed", "device" or "host".
const char* cache_memory_name(CacheMemory memory) noexcept;

}  // namespace ferry
