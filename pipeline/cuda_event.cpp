#include "ferry/pipeline/cuda_event.h"

#include "ferry/build_config.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/fault_injection.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {

CudaEvent::CudaEvent(int device) : device_(device) {
  DeviceGuard guard(device);
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
#endif
}

CudaEvent::~CudaEvent() {
#if FERRY_HAVE_CUDART
  if (event_ != nullptr && cudaEventDestroy(event_) != cudaSuccess) (void)cudaGetLastError();
#endif
}

void CudaEvent::record(CudaStreamHandle stream) {
#if FERRY_HAVE_CUDART
  DeviceGuard guard(device_);
  // Note [fault injection]
  FERRY_CUDA_CHECK(detail::fault_fires(Fault::kEventRecord) ? cudaErrorUnknown : cudaEventRecord(event_, stream));
#else
  (void)stream;
#endif
}

bool CudaEvent::query() const {
#if FERRY_HAVE_CUDART
  // cudaEventQuery needs no current device: the event knows its own.
  const cudaError_t status = detail::fault_fires(Fault::kEventQuery) ? cudaErrorUnknown  // Note [fault injection]
                                                                      : cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not-ready sets the last-error slot; it is an outcome, not an error
    return false;
  }
  FERRY_CUDA_CHECK(status);
#endif
  return true;
}

void CudaEvent::wait_on(CudaStreamHandle stream) const {
#if FERRY_HAVE_CUDART
  DeviceGuard guard(device_);
  FERRY_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
#else
  (void)stream;
#endif
}

void CudaEvent::synchronize() const {
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(cudaEventSynchronize(event_));
#endif
}

}  // namespace ferry
