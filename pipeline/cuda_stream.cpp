#include "ferry/pipeline/cuda_stream.h"

#include "ferry/build_config.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/device_guard.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {

CudaStream::CudaStream(int device, bool non_blocking, bool high_priority) : device_(device) {
  DeviceGuard guard(device);
#if FERRY_HAVE_CUDART
  int priority = 0;  // the default priority; numerically lower is higher
  if (high_priority) {
    int least = 0;
    FERRY_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &priority));
  }
  FERRY_CUDA_CHECK(
      cudaStreamCreateWithPriority(&stream_, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, priority));
#else
  (void)non_blocking;
  (void)high_priority;
#endif
}

CudaStream::~CudaStream() {
#if FERRY_HAVE_CUDART
  if (stream_ != nullptr && cudaStreamDestroy(stream_) != cudaSuccess) (void)cudaGetLastError();
#endif
}

void CudaStream::synchronize() const {
#if FERRY_HAVE_CUDART
  DeviceGuard guard(device_);
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream_));
#endif
}

}  // namespace ferry
