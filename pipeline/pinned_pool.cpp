#include "ferry/pipeline/pinned_pool.h"

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <thread>
#include <utility>

#include "ferry/build_config.h"
#include "ferry/pipeline/align_up.h"
#include "ferry/pipeline/cuda_device.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/cuda_event.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/fault_injection.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

constexpr size_t kPage = 4096;
// How long destruction waits for copies still reading returned slabs before it gives up and leaks
// the memory (freeing it under a running copy would corrupt the process; waiting forever would hang).
constexpr auto kDestroyDeadline = std::chrono::milliseconds(500);

void say_fallback_once(const std::string& reason) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::cerr << "ferry: pinned host memory unavailable (" << reason
              << "); staging slabs use page-aligned pageable memory\n";
  });
}

}  // namespace

namespace {
std::atomic<size_t> g_live_bytes{0};  // PinnedPool::live_bytes()
}  // namespace

size_t PinnedPool::live_bytes() noexcept { return g_live_bytes.load(std::memory_order_relaxed); }

std::optional<size_t> PinnedPool::footprint(size_t slab_bytes, size_t count) noexcept {
  if (slab_bytes > std::numeric_limits<size_t>::max() - kPage) return std::nullopt;
  const size_t stride = align_up(slab_bytes, kPage);
  if (count != 0 && stride > std::numeric_limits<size_t>::max() / count) return std::nullopt;
  return stride * count;
}

std::shared_ptr<PinnedPool> PinnedPool::create(const PinnedPoolOptions& options) {
  return std::shared_ptr<PinnedPool>(new PinnedPool(options));
}

PinnedPool::PinnedPool(const PinnedPoolOptions& options)
    : slab_bytes_(options.slab_bytes),
      slab_count_(options.slab_count),
      slab_stride_(footprint(options.slab_bytes, 1).value_or(0)) {
  const ErrorContext where{"pinned-pool", {}, {}, {}};
  if (slab_bytes_ == 0) throw Error(where, "slab_bytes must be positive");
  if (slab_stride_ == 0) throw Error(where, "slab_bytes " + std::to_string(slab_bytes_) + " is too large");
  if (slab_count_ == 0) throw Error(where, "slab_count must be positive");
  const std::optional<size_t> pinned = footprint(slab_bytes_, slab_count_);
  if (!pinned) throw Error(where, "slab_count * slab_bytes overflows");
  const size_t total = *pinned;
  if (options.budget_bytes != 0 && total > options.budget_bytes) {
    throw Error(where, std::to_string(slab_count_) + " slabs of " + std::to_string(slab_bytes_) + " bytes (" +
                           std::to_string(total) +
                           " pinned, each slab rounded up to a page) exceed the pinned budget of " +
                           std::to_string(options.budget_bytes) + " bytes");
  }

  if (detail::fault_fires(Fault::kStagingAllocation)) {  // Note [fault injection]
    throw Error(where, "cannot allocate " + std::to_string(total) + " bytes of staging memory (an injected fault)");
  }
  if (options.pinned) {
    const std::string unavailable = cuda_unavailable_reason();
    if (unavailable.empty()) {
#if FERRY_HAVE_CUDART
      DeviceGuard guard(options.device);
      void* memory = nullptr;
      ++host_alloc_calls_;
      ++allocations_;
      const cudaError_t status = cudaHostAlloc(&memory, total, cudaHostAllocPortable);
      if (status == cudaSuccess) {
        base_ = static_cast<std::byte*>(memory);
        pinned_ = true;
      } else {
        (void)cudaGetLastError();
        say_fallback_once(std::string("cudaHostAlloc of ") + std::to_string(total) + " bytes failed with " +
                          cudaGetErrorName(status));
      }
#endif
    } else {
      say_fallback_once(unavailable);
    }
  }
  if (base_ == nullptr) {
    ++allocations_;
    base_ = static_cast<std::byte*>(std::aligned_alloc(kPage, total));
    if (base_ == nullptr) throw Error(where, "cannot allocate " + std::to_string(total) + " bytes of staging memory");
  }

  g_live_bytes.fetch_add(total, std::memory_order_relaxed);
  free_.reserve(slab_count_);
  pending_.reserve(slab_count_);
  // Leased from the back: slab 0 first.
  for (size_t i = slab_count_; i-- > 0;) free_.push_back(i);
  allocations_at_start_ = allocations_;
}

PinnedPool::~PinnedPool() {
  // Every lease holds a reference to the pool, so none is out; only pending slabs may still be
  // read by a copy. Wait for them a bounded time.
  const auto deadline = std::chrono::steady_clock::now() + kDestroyDeadline;
  bool copies_done = true;
  for (const Pending& pending : pending_) {
    try {
      while (!pending.event->query()) {
        if (std::chrono::steady_clock::now() > deadline) {
          copies_done = false;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    } catch (const std::exception&) {
      copies_done = false;  // the device is in an error state: do not free memory it may touch
    }
    if (!copies_done) break;
  }
  if (!copies_done) {
    std::cerr << "ferry: pinned pool destroyed while a copy from it had not finished within "
              << kDestroyDeadline.count() << " ms; leaking " << slab_stride_ * slab_count_
              << " bytes rather than freeing memory a copy may still read\n";
    return;  // still counted in live_bytes(): the memory is not given back
  }
  g_live_bytes.fetch_sub(slab_stride_ * slab_count_, std::memory_order_relaxed);
#if FERRY_HAVE_CUDART
  if (pinned_) {
    if (cudaFreeHost(base_) != cudaSuccess) (void)cudaGetLastError();
    return;
  }
#endif
  std::free(base_);
}

PinnedLease PinnedPool::lease_locked(size_t slab) {
  ++leases_;
  leased_ += slab_bytes_;
  if (leased_ > peak_leased_) peak_leased_ = leased_;
  return PinnedLease(shared_from_this(), slab, base_ + slab * slab_stride_, slab_bytes_);
}

bool PinnedPool::reclaim_completed() {
  std::vector<Pending> snapshot;
  {
    std::lock_guard lock(mutex_);
    if (pending_.empty()) return false;
    snapshot = pending_;
  }
  std::vector<const CudaEvent*> completed;
  for (const Pending& pending : snapshot) {
    if (pending.event->query()) completed.push_back(pending.event.get());  // CUDA call, unlocked
  }
  if (completed.empty()) return false;
  std::vector<std::shared_ptr<void>> released;  // dropped after unlocking: freeing tensors takes time
  {
    std::lock_guard lock(mutex_);
    for (const CudaEvent* event : completed) {
      // Matched by event, not slab number: another thread may have reclaimed this slab meanwhile,
      // and it may be pending again under a new event.
      for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if (it->event.get() == event) {
          free_.push_back(it->slab);
          released.push_back(std::move(it->keep_alive));
          pending_.erase(it);
          break;
        }
      }
    }
  }
  return true;
}

std::optional<PinnedLease> PinnedPool::try_acquire() {
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        const size_t slab = free_.back();
        free_.pop_back();
        return lease_locked(slab);
      }
    }
    if (attempt == 0 && !reclaim_completed()) break;
  }
  return std::nullopt;
}

std::optional<PinnedLease> PinnedPool::acquire_unless_stopped(const std::atomic<bool>& stop,
                                                              std::atomic<uint64_t>* waited_ns) {
  std::optional<PinnedLease> lease = try_acquire();
  while (!lease && !stop.load(std::memory_order_acquire)) {
    const auto start = std::chrono::steady_clock::now();
    lease = acquire(std::chrono::milliseconds(20));
    if (waited_ns != nullptr) {
      waited_ns->fetch_add(
          static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count()),
          std::memory_order_relaxed);
    }
  }
  return lease;
}

std::optional<PinnedLease> PinnedPool::acquire(Timeout timeout) {
  if (auto lease = try_acquire()) return lease;
  const auto start = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    ++waits_;
  }
  // Every way out adds the time waited; the clock is read only on this slow path.
  struct Waited {
    PinnedPool& pool;
    std::chrono::steady_clock::time_point start;
    ~Waited() {
      const auto waited = std::chrono::steady_clock::now() - start;
      std::lock_guard lock(pool.mutex_);
      pool.waited_ += waited;
    }
  } waited{*this, start};
  const auto deadline = start + timeout;
  while (true) {
    if (auto lease = try_acquire()) return lease;
    std::unique_lock lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    // A slab comes back either through give_back (which notifies) or when a pending copy completes
    // (which nothing notifies: poll the events again soon).
    const auto poll =
        pending_.empty()
            ? deadline - now
            : std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::microseconds(100));
    returned_.wait_for(lock, std::min<std::chrono::steady_clock::duration>(poll, deadline - now),
                       [&] { return !free_.empty(); });
  }
}

void PinnedPool::give_back(size_t slab, std::shared_ptr<CudaEvent> event, std::shared_ptr<void> keep_alive) noexcept {
  {
    std::lock_guard lock(mutex_);
    leased_ -= slab_bytes_;
    // reserve() in the constructor sized both vectors for every slab: these never allocate.
    if (event) {
      pending_.push_back(Pending{slab, std::move(event), std::move(keep_alive)});
    } else {
      free_.push_back(slab);
    }
  }
  returned_.notify_one();
}

size_t PinnedPool::slabs_in_use() const {
  std::lock_guard lock(mutex_);
  return slab_count_ - free_.size();
}

PinnedPoolStats PinnedPool::stats() const {
  std::lock_guard lock(mutex_);
  PinnedPoolStats s;
  s.slab_bytes = slab_bytes_;
  s.slab_count = slab_count_;
  s.pinned = pinned_;
  s.leases = leases_;
  s.waits = waits_;
  s.wait_seconds = std::chrono::duration<double>(waited_).count();
  s.host_alloc_calls = host_alloc_calls_;
  s.allocations_after_start = allocations_ - allocations_at_start_;
  s.leased_bytes = leased_;
  s.peak_bytes = peak_leased_;
  s.pending = pending_.size();
  return s;
}

}  // namespace ferry
