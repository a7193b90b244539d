#include "ferry/pipeline/pinned_lease.h"

#include <utility>

#include "ferry/pipeline/pinned_pool.h"

namespace ferry {

PinnedLease::PinnedLease(PinnedLease&& other) noexcept
    : pool_(std::move(other.pool_)),
      slab_(other.slab_),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      after_(std::move(other.after_)),
      keep_alive_(std::move(other.keep_alive_)) {}

PinnedLease& PinnedLease::operator=(PinnedLease&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::move(other.pool_);
    slab_ = other.slab_;
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    after_ = std::move(other.after_);
    keep_alive_ = std::move(other.keep_alive_);
  }
  return *this;
}

void PinnedLease::release() noexcept {
  if (!pool_) return;
  std::shared_ptr<PinnedPool> pool = std::move(pool_);
  pool_.reset();
  pool->give_back(slab_, std::move(after_), std::move(keep_alive_));
  after_.reset();
  keep_alive_.reset();
  data_ = nullptr;
  size_ = 0;
}

void PinnedLease::release_completed() noexcept {
  after_.reset();
  keep_alive_.reset();
  release();
}

}  // namespace ferry
