#include "pipeline/cuda_device.h"

#include "ferry/build_config.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {

int cuda_device_count() noexcept {
#if FERRY_HAVE_CUDART
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

std::string cuda_unavailable_reason() {
#if FERRY_HAVE_CUDART
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no CUDA device: cudaGetDeviceCount failed with ") + cudaGetErrorName(error) + " (" +
           cudaGetErrorString(error) + ")";
  }
  return count > 0 ? std::string() : std::string("no CUDA device: the driver reports 0 devices");
#else
  return "no CUDA device: ferry was built without the CUDA runtime (" FERRY_BUILD_REASON ")";
#endif
}

bool gpu_build() noexcept { return FERRY_WITH_GPU != 0; }

std::string build_description() { return FERRY_BUILD_KIND " build: " FERRY_BUILD_REASON; }

}  // namespace ferry
