#include "ferry/pipeline/device_guard.h"

#include "ferry/build_config.h"
#include "ferry/pipeline/cuda_error.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {

DeviceGuard::DeviceGuard(int device) {
  if (device < 0) return;
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    FERRY_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
#else
  throw Error("cannot select CUDA device " + std::to_string(device) + ": ferry was built without the CUDA runtime");
#endif
}

DeviceGuard::~DeviceGuard() {
#if FERRY_HAVE_CUDART
  // A destructor must not throw; failing to restore leaves the thread on a valid device anyway.
  if (changed_ && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
#endif
}

}  // namespace ferry
