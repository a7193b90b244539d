#pragma once

#include "ferry/pipeline/cuda_types.h"

namespace ferry {

/// An owned CUDA event on one device (RAII), created without timing (cheaper to record and query).
/// Events are recycled through CudaEventPool rather than created per batch.
///
/// Thread-safety: record() from one thread at a time; query() and wait_on() from any thread.
class CudaEvent {
 public:
  /// Throws ferry::CudaError when the event cannot be created.
  explicit CudaEvent(int device);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  /// Marks the point in `stream` after all work queued so far. Does not block. Throws on errors.
  void record(CudaStreamHandle stream);

  /// True once the work before the last record() has completed (or when never recorded).
  /// Never blocks: cudaErrorNotReady is "not yet", not an error. Throws on real CUDA errors.
  bool query() const;

  /// Makes `stream` wait, on the device, for the work before the last record(). The calling thread
  /// does not block. Later re-recording of this event does not affect the wait already queued.
  void wait_on(CudaStreamHandle stream) const;

  /// Blocks the calling thread until the recorded work has completed.
  void synchronize() const;

  CudaEventHandle handle() const noexcept { return event_; }
  int device() const noexcept { return device_; }

 private:
  int device_;
  CudaEventHandle event_ = nullptr;
};

}  // namespace ferry
