#include "ferry/pipeline/cuda_event_pool.h"

namespace ferry {

std::shared_ptr<CudaEventPool> CudaEventPool::create(int device) {
  return std::shared_ptr<CudaEventPool>(new CudaEventPool(device));
}

std::shared_ptr<CudaEvent> CudaEventPool::acquire() {
  std::unique_ptr<CudaEvent> event;
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      event = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (!event) {
    event = std::make_unique<CudaEvent>(device_);  // CUDA call: outside the lock
    std::lock_guard lock(mutex_);
    ++created_;
  }
  std::weak_ptr<CudaEventPool> pool = weak_from_this();
  return std::shared_ptr<CudaEvent>(event.release(), [pool](CudaEvent* e) {
    if (auto owner = pool.lock()) {
      owner->give_back(e);
    } else {
      delete e;
    }
  });
}

size_t CudaEventPool::created() const {
  std::lock_guard lock(mutex_);
  return created_;
}

void CudaEventPool::give_back(CudaEvent* event) noexcept {
  std::unique_ptr<CudaEvent> owned(event);
  std::lock_guard lock(mutex_);
  try {
    free_.push_back(std::move(owned));
  } catch (...) {
    // Out of memory while growing the free list: let the event be destroyed instead.
  }
}

}  // namespace ferry
