#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ferry/pipeline/pinned_lease.h"
#include "ferry/pipeline/pipeline_stats.h"

namespace ferry {

class CudaEvent;

struct PinnedPoolOptions {
  size_t slab_bytes = size_t{64} << 20;
  size_t slab_count = 4;
  /// Upper bound on pinned bytes (0: none). Slabs that need more — each slab rounded up to a page —
  /// are an error at construction, so the pool can never pin more than the budget.
  size_t budget_bytes = 0;
  /// Device whose context is current while pinning (the memory is portable to every device).
  int device = 0;
  /// false: never pin (page-aligned pageable memory), e.g. for pipelines that deliver to the CPU.
  bool pinned = true;
};

/// A fixed set of equally sized host buffers ("slabs") for staging host-to-device copies.
///
/// All memory is allocated once, at construction, in one cudaHostAlloc call (pinning costs about
/// 2.3 GiB/s, so it must never happen on the hot path); afterwards no allocation happens at all and
/// the pinned bytes never exceed slab_count * slab_bytes (<= budget_bytes when given). Without a
/// CUDA device — or with pinned=false — it uses page-aligned pageable memory instead and says so
/// once per process on stderr (when pinning was asked for).
///
/// Slabs are leased RAII-style (PinnedLease). Thread-safe: every method.
///
/// Note [pinned slab reuse]
/// ~~~~~~~~~~~~~~~~~~~~~~~~
/// A slab handed to cudaMemcpyAsync is read by the copy engine some time after the call returns. It
/// must not be leased again — and overwritten by the next batch's pack — before that copy is done.
/// So a lease may carry the CUDA event recorded after its last copy; when such a lease is returned,
/// its slab goes to a `pending_` list with the event instead of the free list. acquire() moves pending
/// slabs whose event has completed to the free list. The rules, as in PyTorch's caching host
/// allocator:
///   * the completion check is cudaEventQuery (never a blocking sync), and cudaErrorNotReady means
///     "not yet";
///   * no CUDA call is made while `mutex_` is held: acquire() copies the pending events out under
///     the lock, queries them unlocked, then retakes the lock to move the completed ones;
///   * an event in `pending_` is never re-recorded: the pool holds a reference, and the event pool
///     recycles an event only when its last reference is dropped.
class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  using Timeout = std::chrono::microseconds;

  /// Allocates every slab. Throws ferry::Error for a zero size or count, an overflow, a budget
  /// below slab_count * slab_bytes, or when even the pageable fallback cannot be allocated.
  static std::shared_ptr<PinnedPool> create(const PinnedPoolOptions& options);
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  /// A free slab, or nullopt when none is free (after reclaiming pending slabs whose copy is done).
  /// Does not block; may query CUDA events (outside the lock). Throws ferry::CudaError if a query
  /// reports a real CUDA error.
  std::optional<PinnedLease> try_acquire();

  /// Like try_acquire, but waits up to `timeout` for a slab (counted in stats().waits, the time in
  /// stats().wait_seconds). Blocks.
  std::optional<PinnedLease> acquire(Timeout timeout);

  /// A slab, waiting for one in slices of 20 ms (each an acquire() call) until one is free or `stop`
  /// turns true (then nullopt). `waited_ns`, when given, gains the time of the slices that waited, as
  /// stats() counts it. Blocks: for a pipeline's pack and split nodes, whose waits Note [tokens] keeps
  /// short.
  std::optional<PinnedLease> acquire_unless_stopped(const std::atomic<bool>& stop,
                                                    std::atomic<uint64_t>* waited_ns = nullptr);

  /// Staging bytes (pinned or the pageable fallback) held by every pool of this process now: what a
  /// leak check compares before and after building and dropping pipelines. Thread-safe.
  static size_t live_bytes() noexcept;
  /// Pinned bytes that `count` slabs of `slab_bytes` take: each is rounded up to a page. What the
  /// pool pins, and what a budget is compared with. nullopt when it overflows size_t.
  static std::optional<size_t> footprint(size_t slab_bytes, size_t count) noexcept;

  size_t slab_bytes() const noexcept { return slab_bytes_; }
  size_t slab_count() const noexcept { return slab_count_; }
  bool pinned() const noexcept { return pinned_; }
  PinnedPoolStats stats() const;
  /// Slabs leased or waiting for their copy's event: not free now. Thread-safe.
  size_t slabs_in_use() const;

 private:
  friend class PinnedLease;
  struct Pending {
    size_t slab;
    std::shared_ptr<CudaEvent> event;
    std::shared_ptr<void> keep_alive;  // released with the slab, once the event has completed
  };

  explicit PinnedPool(const PinnedPoolOptions& options);
  void give_back(size_t slab, std::shared_ptr<CudaEvent> event, std::shared_ptr<void> keep_alive) noexcept;
  PinnedLease lease_locked(size_t slab);  // requires mutex_
  bool reclaim_completed();               // must be called without mutex_

  const size_t slab_bytes_;
  const size_t slab_count_;
  const size_t slab_stride_;  // slab_bytes rounded up to a page, so every slab is page-aligned
  bool pinned_ = false;
  std::byte* base_ = nullptr;
  uint64_t host_alloc_calls_ = 0;
  // Staging-memory allocations: every one is made by the constructor, which records the count it
  // ends with; stats() reports any made since (none, while the design holds).
  uint64_t allocations_ = 0;
  uint64_t allocations_at_start_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<size_t> free_;      // slabs ready to lease
  std::vector<Pending> pending_;  // returned, waiting for their copy event
  uint64_t leases_ = 0;
  uint64_t waits_ = 0;
  std::chrono::steady_clock::duration waited_{};
  size_t leased_ = 0;
  size_t peak_leased_ = 0;
};

}  // namespace ferry
