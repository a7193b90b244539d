#include "ferry/pipeline/dataset_cache.h"

#include <algorithm>

#include "ferry/build_config.h"
#include "ferry/pipeline/align_up.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/cuda_stream.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/segment_copy.h"
#include "ferry/pipeline/unified_memory.h"
#include "ferry/pipeline/work_items.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

constexpr size_t kFieldAlignment = 16;
constexpr size_t kMaxPendingTimings = 64;

size_t field_bytes(const DatasetCache::Field& field, int64_t rows) {
  size_t n = c10::elementSize(field.dtype);
  for (size_t d = 0; d < field.shape.size(); ++d) {
    n *= static_cast<size_t>(d == 0 && field.variable() ? rows : field.shape[d]);
  }
  return n;
}

}  // namespace

const char* cache_memory_name(CacheMemory memory) noexcept {
  switch (memory) {
    case CacheMemory::kOff: return "off";
    case CacheMemory::kManaged: return "managed";
    case CacheMemory::kDevice: return "device";
    case CacheMemory::kHost: return "host";
  }
  return "unknown";
}

struct DatasetCache::Timing {
#if FERRY_HAVE_CUDART
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  Timing() {
    FERRY_CUDA_CHECK(cudaEventCreate(&start));
    if (cudaEventCreate(&end) != cudaSuccess) {
      (void)cudaEventDestroy(start);
      FERRY_CUDA_CHECK(cudaGetLastError());
    }
  }
  ~Timing() {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(end);
  }
#endif
};

size_t DatasetCache::sample_bytes(const std::vector<Field>& fields, const std::vector<int64_t>& field_rows) {
  size_t total = 0;
  for (size_t f = 0; f < fields.size(); ++f)
    total += align_up(field_bytes(fields[f], f < field_rows.size() ? field_rows[f] : 0), kFieldAlignment);
  return total;
}

std::shared_ptr<DatasetCache> DatasetCache::create(Options options) {
  if (options.memory == CacheMemory::kOff) throw Error("DatasetCache::create: cache.memory is off");
  return std::shared_ptr<DatasetCache>(new DatasetCache(std::move(options)));
}

DatasetCache::DatasetCache(Options options) : options_(std::move(options)) {
  variable_fields_.assign(options_.fields.size(), SIZE_MAX);
  for (size_t f = 0; f < options_.fields.size(); ++f) {
    if (options_.fields[f].variable()) variable_fields_[f] = variable_count_++;
  }
  slots_ = std::make_unique<std::atomic<uint64_t>[]>(options_.source_samples);
  if (variable_count_ != 0) rows_ = std::make_unique<int64_t[]>(options_.source_samples * variable_count_);
  const size_t bytes = options_.capacity_bytes;
  const std::string what = "the dataset cache (" + detail::bytes_text(bytes) + ")";
  switch (options_.memory) {
    case CacheMemory::kHost:
      location_ = -1;
      host_arena_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
      arena_ = host_arena_.get();
      break;
    case CacheMemory::kManaged:
      location_ = options_.device;
      arena_ = static_cast<std::byte*>(allocate_managed(bytes, options_.device, what));
      break;
    case CacheMemory::kDevice: {
      location_ = options_.device;
#if FERRY_HAVE_CUDART
      DeviceGuard guard(options_.device);
      size_t free = 0, total = 0;
      FERRY_CUDA_CHECK(cudaMemGetInfo(&free, &total));
      if (bytes > free) {
        throw Error(what + " does not fit: cuda:" + std::to_string(options_.device) + " has " +
                    detail::bytes_text(free) + " free; lower cache.max_bytes, or turn the cache off");
      }
      void* pointer = nullptr;
      if (bytes != 0) FERRY_CUDA_CHECK(cudaMalloc(&pointer, bytes));
      arena_ = static_cast<std::byte*>(pointer);
#else
      throw Error("cache.memory: device needs the CUDA runtime, which this build lacks");
#endif
      break;
    }
    case CacheMemory::kOff: break;
  }
}

DatasetCache::~DatasetCache() {
#if FERRY_HAVE_CUDART
  if (options_.memory != CacheMemory::kHost && options_.device >= 0) {
    // The arena goes only after every gather and fill queued on any stream of the device is done.
    DeviceGuard guard(options_.device);
    (void)cudaDeviceSynchronize();
    pending_timings_.clear();
    free_timings_.clear();
    if (options_.memory == CacheMemory::kManaged) {
      free_managed(arena_);
    } else if (arena_ != nullptr) {
      (void)cudaFree(arena_);
    }
    (void)cudaGetLastError();
  }
#endif
}

bool DatasetCache::contains(uint64_t index) const noexcept {
  if (index >= options_.source_samples) return false;
  const uint64_t slot = slots_[index].load(std::memory_order_acquire);
  return slot != 0 && slot != kReserved;
}

int64_t DatasetCache::rows(uint64_t index, size_t field) const noexcept {
  const size_t column = field < variable_fields_.size() ? variable_fields_[field] : SIZE_MAX;
  if (column == SIZE_MAX) return options_.fields.at(field).shape.empty() ? 1 : options_.fields[field].shape[0];
  return rows_[index * variable_count_ + column];
}

void DatasetCache::harvest_timings() {
#if FERRY_HAVE_CUDART
  while (!pending_timings_.empty()) {
    Timing& timing = *pending_timings_.front();
    const cudaError_t state = cudaEventQuery(timing.end);
    if (state == cudaErrorNotReady) return;
    float ms = 0.0f;
    if (state == cudaSuccess && cudaEventElapsedTime(&ms, timing.start, timing.end) == cudaSuccess) {
      gather_ns_.fetch_add(static_cast<uint64_t>(static_cast<double>(ms) * 1e6), std::memory_order_relaxed);
      timed_gathers_.fetch_add(1, std::memory_order_relaxed);
    }
    (void)cudaGetLastError();
    free_timings_.push_back(std::move(pending_timings_.front()));
    pending_timings_.pop_front();
  }
#endif
}

void DatasetCache::serve(const BatchWork& work, std::byte* batch, bool from_host, CudaStreamHandle stream) {
  const BatchLayout& layout = work.layout;
  const size_t field_count = options_.fields.size();
  // The layout field each source field lands in.
  placed_.assign(field_count, nullptr);
  for (const FieldLayout& field : layout.fields) {
    if (field.source_field >= 0) placed_.at(static_cast<size_t>(field.source_field)) = &field;
  }
  gather_.clear();
  fill_.clear();
  kept_indices_.clear();
  kept_offsets_.clear();
  kept_rows_.clear();
  size_t used = used_;  // committed with the publish, so a throw below leaks no space
  uint64_t hits = 0;
  // Slots reserved for this batch's new samples: a sample twice in the batch is kept once; a throw
  // before the publish gives them back.
  struct Unreserve {
    DatasetCache& cache;
    bool armed = true;
    ~Unreserve() {
      if (!armed) return;
      for (const uint64_t index : cache.kept_indices_) cache.slots_[index].store(0, std::memory_order_relaxed);
    }
  } unreserve{*this};

  for (size_t s = 0; s < work.samples.size(); ++s) {
    const SampleWork& sample = *work.samples[s];
    const uint64_t index = sample.index();
    if (sample.cached) {
      ++hits;
      const uint64_t slot = slots_[index].load(std::memory_order_acquire);
      if (slot == 0 || slot == kReserved)
        throw Error("dataset cache: sample " + std::to_string(index) + " is not kept");
      size_t offset = slot - 1;
      for (size_t f = 0; f < field_count; ++f) {
        const FieldLayout& field = *placed_[f];
        const size_t bytes = field_bytes(options_.fields[f], rows(index, f));
        const size_t element = c10::elementSize(field.dtype);
        gather_.push_back(CopySegment{batch + field.offset + s * field.slot_bytes, arena_ + offset, bytes,
                                      field.slot_bytes - bytes, field.pad, static_cast<uint32_t>(element)});
        offset += align_up(bytes, kFieldAlignment);
      }
      continue;
    }
    // A sample copied from the host: keep it, unless it is kept (or reserved) already or does not fit.
    if (index >= options_.source_samples || slots_[index].load(std::memory_order_relaxed) != 0) continue;
    const size_t first_row = kept_rows_.size();
    for (size_t f = 0; f < field_count; ++f) {
      kept_rows_.push_back(options_.fields[f].variable() ? sample.fields.at(f).size(0) : 0);
    }
    size_t size = 0;
    for (size_t f = 0; f < field_count; ++f)
      size += align_up(field_bytes(options_.fields[f], kept_rows_[first_row + f]), kFieldAlignment);
    if (size > options_.capacity_bytes - used) {
      kept_rows_.resize(first_row);
      not_kept_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    slots_[index].store(kReserved, std::memory_order_relaxed);
    kept_indices_.push_back(index);
    kept_offsets_.push_back(used);
    size_t offset = used;
    used += size;
    for (size_t f = 0; f < field_count; ++f) {
      const FieldLayout& field = *placed_[f];
      const size_t bytes = field_bytes(options_.fields[f], kept_rows_[first_row + f]);
      fill_.push_back(CopySegment{arena_ + offset, batch + field.offset + s * field.slot_bytes, bytes, 0, {}, 1});
      offset += align_up(bytes, kFieldAlignment);
    }
  }
  if (!from_host) {
    // Nothing came from the host: the fields collate made (the lengths) are written as fills.
    for (const FieldLayout& field : layout.fields) {
      if (field.source_field >= 0 || field.bytes == 0) continue;
      const size_t element = c10::elementSize(field.dtype);
      const auto* values = static_cast<const std::byte*>(field.made.data_ptr());
      for (size_t at = 0; at < field.bytes; at += element) {
        CopySegment segment{batch + field.offset + at, nullptr, 0, element, {}, static_cast<uint32_t>(element)};
        std::copy(values + at, values + at + element, segment.pattern.begin());
        gather_.push_back(segment);
      }
    }
  }

  const bool on_host = options_.memory == CacheMemory::kHost;
  if (!gather_.empty()) {
    gathers_.fetch_add(1, std::memory_order_relaxed);
    if (on_host) {
      const auto start = std::chrono::steady_clock::now();
      copy_segments_on_host(gather_);
      gather_ns_.fetch_add(
          static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count()),
          std::memory_order_relaxed);
      timed_gathers_.fetch_add(1, std::memory_order_relaxed);
    } else {
#if FERRY_HAVE_CUDART
      harvest_timings();
      std::unique_ptr<Timing> timing;
      if (!free_timings_.empty()) {
        timing = std::move(free_timings_.back());
        free_timings_.pop_back();
      } else if (pending_timings_.size() < kMaxPendingTimings) {
        timing = std::make_unique<Timing>();
      }
      if (timing) FERRY_CUDA_CHECK(cudaEventRecord(timing->start, stream));
      copy_segments_on_device(gather_, stream);
      if (timing) {
        FERRY_CUDA_CHECK(cudaEventRecord(timing->end, stream));
        pending_timings_.push_back(std::move(timing));
      }
#endif
    }
  }
  if (!fill_.empty()) {
    if (on_host) {
      copy_segments_on_host(fill_);
    } else {
      copy_segments_on_device(fill_, stream);
    }
  }
  // Published once the fills are queued (Note [dataset cache]).
  for (size_t k = 0; k < kept_indices_.size(); ++k) {
    const uint64_t index = kept_indices_[k];
    for (size_t f = 0; f < field_count; ++f) {
      if (variable_fields_[f] != SIZE_MAX)
        rows_[index * variable_count_ + variable_fields_[f]] = kept_rows_[k * field_count + f];
    }
    slots_[index].store(kept_offsets_[k] + 1, std::memory_order_release);
  }
  unreserve.armed = false;
  used_ = used;
  kept_.fetch_add(kept_indices_.size(), std::memory_order_relaxed);
  used_bytes_.store(used_, std::memory_order_relaxed);
  hits_.fetch_add(hits, std::memory_order_relaxed);
  const uint64_t misses = work.samples.size() - hits;
  misses_.fetch_add(misses, std::memory_order_relaxed);
  std::lock_guard lock(epochs_mutex_);
  if (epochs_.empty() || epochs_.back().first != work.info.epoch) {
    epochs_.emplace_back(work.info.epoch, misses == 0);
  } else {
    epochs_.back().second = epochs_.back().second && misses == 0;
  }
}

void DatasetCache::move_to(int device) {
  if (options_.memory != CacheMemory::kManaged) {
    throw Error(std::string("cache_to: the cache is in ") + cache_memory_name(options_.memory) +
                " memory, which cannot move; only cache.memory: managed can");
  }
  if (device != -1 && device != options_.device) {
    throw Error("cache_to(" + std::to_string(device) +
                "): the cache belongs to cuda:" + std::to_string(options_.device) + "; move it to " +
                std::to_string(options_.device) + " or to -1 (the host)");
  }
  std::lock_guard lock(move_mutex_);
  const auto start = std::chrono::steady_clock::now();
  const std::string what = "the dataset cache";
  if (options_.capacity_bytes != 0) {
    DeviceGuard guard(options_.device);
    advise_managed_preferred_location(arena_, options_.capacity_bytes, device, what);
    const size_t used = used_bytes_.load(std::memory_order_relaxed);
    if (used != 0) {
      CudaStream stream(options_.device);
      prefetch_managed(arena_, used, device, stream.handle(), what);
      stream.synchronize();
    }
  }
  location_.store(device);
  moves_.fetch_add(1, std::memory_order_relaxed);
  last_move_ns_.store(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count()));
}

DatasetCacheStats DatasetCache::stats() const {
  DatasetCacheStats stats;
  stats.enabled = true;
  stats.memory = cache_memory_name(options_.memory);
  const int location = location_.load();
  stats.location = location < 0 ? "host" : "cuda:" + std::to_string(location);
  stats.capacity_bytes = options_.capacity_bytes;
  stats.used_bytes = used_bytes_.load(std::memory_order_relaxed);
  stats.samples = kept_.load(std::memory_order_relaxed);
  stats.hits = hits_.load(std::memory_order_relaxed);
  stats.misses = misses_.load(std::memory_order_relaxed);
  stats.not_kept = not_kept_.load(std::memory_order_relaxed);
  stats.gathers = gathers_.load(std::memory_order_relaxed);
  stats.timed_gathers = timed_gathers_.load(std::memory_order_relaxed);
  stats.gather_seconds = static_cast<double>(gather_ns_.load(std::memory_order_relaxed)) * 1e-9;
  stats.moves = moves_.load(std::memory_order_relaxed);
  stats.last_move_seconds = static_cast<double>(last_move_ns_.load()) * 1e-9;
  std::lock_guard lock(epochs_mutex_);
  for (const auto& [epoch, all_hits] : epochs_) stats.hit_epochs += all_hits ? 1 : 0;
  return stats;
}

}  // namespace ferry
