#include "ferry/stages/dataset_cache_plan.h"

#include <unistd.h>
#include <algorithm>

#include "ferry/build_config.h"
#include "ferry/io/util/units.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/segment_copy.h"
#include "ferry/pipeline/unified_memory.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

size_t free_device_bytes(int device) {
#if FERRY_HAVE_CUDART
  DeviceGuard guard(device);
  size_t free = 0, total = 0;
  FERRY_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
#else
  (void)device;
  return 0;
#endif
}

}  // namespace

const char* const kCacheRepeats =
    ": a cache would repeat the first epoch's samples (use crop: center for a cached field, or turn the cache off)";

DatasetCache::Options plan_dataset_cache(const DecodeStage& decode, const PipelineOptions& options, at::Device device,
                                         const Sampler& sampler, std::optional<size_t> largest_batch) {
  const CacheOptions& cache = options.cache;
  const Source& source = *decode.source();
  const std::vector<FieldSpec>& specs = decode.fields();
  if (const std::string why = decode.varies_by_epoch(); !why.empty()) {
    throw Error(why + kCacheRepeats);
  }
  // The cache keeps each sample in a slot of its field's stacked or padded layout.
  for (const auto& [names, how] : {std::pair{&options.collate.lists, "as a list (collate.lists)"},
                                   std::pair{&options.collate.host, "on the host (collate.host)"}}) {
    if (!names->empty()) {
      throw Error("field '" + names->front() + "' is delivered " + how +
                  ", which the dataset cache does not keep: turn the cache off (cache.memory: off), or deliver the "
                  "field stacked on the device");
    }
  }
  const std::string memory = cache_memory_name(cache.memory);
  if (cache.memory == CacheMemory::kHost && device.is_cuda()) {
    throw Error("cache.memory: host is for a pipeline that delivers to the CPU; this one delivers to " + device.str() +
                ": use managed or device");
  }
  if ((cache.memory == CacheMemory::kManaged || cache.memory == CacheMemory::kDevice) && !device.is_cuda()) {
    throw Error("cache.memory: " + memory + " keeps the cache on a GPU, but this pipeline delivers to " + device.str() +
                ": use host");
  }
  const int index = device.is_cuda() ? device.index() : -1;
  if (device.is_cuda()) {
    if (const std::string why = segment_kernel_reason(); !why.empty()) {
      throw Error("cache.memory: " + memory +
                  " gathers batches on the GPU with ferry's kernel, which this build lacks: " + why);
    }
    if (cache.memory == CacheMemory::kManaged) require_unified_memory(index);
  }

  DatasetCache::Options plan;
  plan.memory = cache.memory;
  plan.device = index;
  plan.source_samples = source.size();
  std::vector<int64_t> longest(specs.size(), 0);
  std::string unbounded;
  for (size_t f = 0; f < specs.size(); ++f) {
    plan.fields.push_back(DatasetCache::Field{specs[f].dtype, specs[f].shape});
    if (specs[f].variable()) {
      if (specs[f].max_length) {
        longest[f] = *specs[f].max_length;
      } else if (unbounded.empty()) {
        unbounded = specs[f].name;
      }
    }
  }
  // The distinct samples this rank can visit: one epoch's share when the sampler gives it the same one
  // every epoch; with several ranks and a shuffle, another share each epoch, up to the whole source.
  const uint64_t epoch_samples = sampler.epoch_size();
  const uint64_t epochs = sampler.same_samples_every_epoch() ? 1 : options.epochs;
  const uint64_t visits =
      epochs > UINT64_MAX / std::max<uint64_t>(epoch_samples, 1) ? UINT64_MAX : epoch_samples * epochs;
  const uint64_t samples = std::min<uint64_t>(source.size(), visits);
  const size_t per_sample = DatasetCache::sample_bytes(plan.fields, longest);
  // In 128 bits: samples x bytes may pass 64.
  __extension__ typedef unsigned __int128 Wide;
  const Wide bound = static_cast<Wide>(per_sample) * samples;
  const std::string what = std::to_string(samples) + " samples of " + source.describe();
  if (!unbounded.empty()) {
    if (cache.max_bytes == 0) {
      throw Error("field '" + unbounded +
                  "' is variable-length with no max_length, so the cache's size is unknown: "
                  "set cache.max_bytes (or the field's max_length)");
    }
    plan.capacity_bytes = cache.max_bytes;
  } else if (cache.max_bytes != 0 && bound > cache.max_bytes) {
    const bool fixed = std::none_of(specs.begin(), specs.end(), [](const FieldSpec& spec) { return spec.variable(); });
    if (fixed) {
      throw Error("the cache needs " + format_byte_size(static_cast<size_t>(std::min<Wide>(bound, SIZE_MAX))) +
                  " for " + what + " (" + format_byte_size(per_sample) + " each), more than cache.max_bytes (" +
                  format_byte_size(cache.max_bytes) + "): raise it, or turn the cache off");
    }
    plan.capacity_bytes = cache.max_bytes;  // samples that do not fit stay uncached
  } else {
    if (bound > SIZE_MAX) throw Error("the cache for " + what + " would pass 2^64 bytes");
    plan.capacity_bytes = static_cast<size_t>(bound);
  }

  // The index -> slot table and the lengths live on the host, one entry per source sample.
  const size_t variable = static_cast<size_t>(
      std::count_if(specs.begin(), specs.end(), [](const FieldSpec& spec) { return spec.variable(); }));
  const Wide table = static_cast<Wide>(source.size()) * (8 + 8 * variable);
  const long host_pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  const Wide host_memory =
      host_pages > 0 && page_size > 0 ? static_cast<Wide>(host_pages) * static_cast<Wide>(page_size) : ~Wide{0};
  if (table * 4 > host_memory) {
    throw Error("the cache's index of " + std::to_string(source.size()) + " samples of " + source.describe() +
                " would take " + format_byte_size(static_cast<size_t>(std::min<Wide>(table, SIZE_MAX))) +
                " of host memory, more than a quarter of this machine's: turn the cache off for a source this large");
  }

  // Room beside the cache: on the device, the batches in flight; on the host, the machine's memory.
  if (device.is_cuda()) {
    const size_t in_flight = largest_batch ? *largest_batch * options.prefetch : 0;
    const size_t free = free_device_bytes(index);
    if (plan.capacity_bytes > free || free - plan.capacity_bytes < in_flight) {
      throw Error(
          "the cache needs " + format_byte_size(plan.capacity_bytes) + " for " + what +
          (in_flight ? " and the batches in flight up to " + format_byte_size(in_flight) : std::string()) + ", but " +
          device.str() + " has " + format_byte_size(free) +
          " free (memory libtorch's allocator holds unused counts as taken: torch.cuda.empty_cache() returns it): "
          "set cache.max_bytes lower, use fewer samples, or turn the cache off");
    }
  } else {
    const size_t physical = static_cast<size_t>(std::min<Wide>(host_memory, SIZE_MAX));
    if (plan.capacity_bytes > physical) {
      throw Error("the cache needs " + format_byte_size(plan.capacity_bytes) + " for " + what +
                  ", more than this machine's " + format_byte_size(physical) +
                  " of memory: set cache.max_bytes lower, or turn the cache off");
    }
  }
  return plan;
}

}  // namespace ferry
