#pragma once

namespace ferry {

/// Makes `device` the calling thread's current CUDA device for the guard's lifetime and restores
/// the previous one afterwards. Every ferry function that touches device memory, a stream or an
/// event opens one first: CUDA's current device is per thread and TBB workers are shared, so
/// nothing may assume what an earlier task left current. A negative device is a no-op (CPU work).
///
/// Blocks: no. Allocates: no. Thread-safe: it only touches the calling thread's state.
/// Throws ferry::CudaError when the device cannot be made current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

}  // namespace ferry
