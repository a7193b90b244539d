#pragma once

#include <cstddef>
#include <memory>

namespace ferry {

class CudaEvent;
class PinnedPool;

/// Exclusive use of one slab of a PinnedPool (RAII). Destroying or release()-ing the lease returns
/// the slab; if a CUDA event was attached, the pool reuses the slab only after that event has
/// completed (see Note [pinned slab reuse] in pinned_pool.h). Attach the event recorded after the
/// last copy that reads the slab as soon as that copy is queued: then every path that drops the
/// lease — delivery, an error, shutdown — is safe.
///
/// Movable, not copyable. Not thread-safe: one owner at a time.
class PinnedLease {
 public:
  PinnedLease() = default;
  PinnedLease(PinnedLease&& other) noexcept;
  PinnedLease& operator=(PinnedLease&& other) noexcept;
  PinnedLease(const PinnedLease&) = delete;
  PinnedLease& operator=(const PinnedLease&) = delete;
  ~PinnedLease() { release(); }

  std::byte* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  size_t slab() const noexcept { return slab_; }
  explicit operator bool() const noexcept { return pool_ != nullptr; }

  /// The slab must not be reused before `event` completes; `keep_alive` (other memory the same
  /// copies read, such as pinned tensors copied in place) is released only then too. Replaces an
  /// earlier event: attach the one recorded after the last copy. Does not block.
  void attach_event(std::shared_ptr<CudaEvent> event, std::shared_ptr<void> keep_alive = {}) noexcept {
    after_ = std::move(event);
    keep_alive_ = std::move(keep_alive);
  }

  /// Returns the slab now (or, with an attached event, once it has completed). Idempotent.
  void release() noexcept;
  /// For a caller that has seen the attached event complete: returns the slab to the free slabs at
  /// once, and drops what the event kept alive here, so that the next acquire finds it without
  /// querying the event again. Idempotent.
  void release_completed() noexcept;

 private:
  friend class PinnedPool;
  PinnedLease(std::shared_ptr<PinnedPool> pool, size_t slab, std::byte* data, size_t size) noexcept
      : pool_(std::move(pool)), slab_(slab), data_(data), size_(size) {}

  std::shared_ptr<PinnedPool> pool_;
  size_t slab_ = 0;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<CudaEvent> after_;
  std::shared_ptr<void> keep_alive_;
};

}  // namespace ferry
