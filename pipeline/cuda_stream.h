#pragma once

#include "ferry/pipeline/cuda_types.h"

namespace ferry {

/// An owned CUDA stream on one device (RAII). ferry's copies run on a non-blocking stream of their
/// own, so that they never serialise with the legacy default stream the training loop may use.
///
/// Construction and destruction are CUDA calls (made under a DeviceGuard); nothing else is.
/// Destruction does not wait: the runtime releases the stream once its queued work completes.
class CudaStream {
 public:
  /// Throws ferry::CudaError when the stream cannot be created (no device, bad index).
  /// high_priority: the device's greatest stream priority, so this stream's work is scheduled ahead
  /// of work queued on normal-priority streams.
  explicit CudaStream(int device, bool non_blocking = true, bool high_priority = false);
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  CudaStreamHandle handle() const noexcept { return stream_; }
  int device() const noexcept { return device_; }

  /// Blocks the calling thread until all work queued so far has finished. Throws on CUDA errors.
  void synchronize() const;

 private:
  int device_;
  CudaStreamHandle stream_ = nullptr;
};

}  // namespace ferry
