#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "ferry/pipeline/cuda_event.h"

namespace ferry {

/// Recycles CUDA events of one device. acquire() hands out a shared event whose last owner gives it
/// back to the pool instead of destroying it, so steady-state batches create no events. Events are
/// shared because several parties must see the same copy complete: the batch (its consumer's stream
/// waits on it) and the pinned slab it was copied from (which returns to its pool only after it).
///
/// Thread-safe. The pool may be destroyed while events are out: they are then destroyed by their
/// last owner.
class CudaEventPool : public std::enable_shared_from_this<CudaEventPool> {
 public:
  static std::shared_ptr<CudaEventPool> create(int device);

  /// A free event, or a new one (a CUDA call, made outside the pool's lock). Does not block.
  std::shared_ptr<CudaEvent> acquire();

  int device() const noexcept { return device_; }
  /// Events created so far (grows only until the pool covers the events in flight).
  size_t created() const;

 private:
  explicit CudaEventPool(int device) : device_(device) {}
  void give_back(CudaEvent* event) noexcept;

  const int device_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<CudaEvent>> free_;
  size_t created_ = 0;
};

}  // namespace ferry
