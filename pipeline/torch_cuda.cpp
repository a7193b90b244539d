#include "ferry/pipeline/torch_cuda.h"

#include "ferry/build_config.h"
#include "ferry/pipeline/error.h"

#if FERRY_WITH_GPU
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ferry::detail {

#if FERRY_WITH_GPU

at::Tensor allocate_device_buffer(int device, CudaStreamHandle stream, size_t bytes) {
  const auto index = static_cast<c10::DeviceIndex>(device);
  c10::cuda::CUDAStreamGuard on_stream(c10::cuda::getStreamFromExternal(stream, index));
  return at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, index));
}

CudaStreamHandle current_torch_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

void record_stream(const at::Tensor& buffer, CudaStreamHandle stream) {
  const auto index = buffer.device().index();
  c10::cuda::CUDACachingAllocator::recordStream(buffer.storage().data_ptr(),
                                                c10::cuda::getStreamFromExternal(stream, index));
}

void copy_on_stream(const at::Tensor& target, const at::Tensor& source, int device, CudaStreamHandle stream) {
  const auto index = static_cast<c10::DeviceIndex>(device);
  c10::cuda::CUDAStreamGuard on_stream(c10::cuda::getStreamFromExternal(stream, index));
  c10::NoGradGuard no_grad;  // a copy of data, not a step of the caller's graph
  target.copy_(source, /*non_blocking=*/true);
}

at::Tensor allocate_pinned(at::IntArrayRef sizes, at::ScalarType dtype) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).pinned_memory(true));
}

#else

namespace {
[[noreturn]] void no_gpu() { throw Error("this ferry build has no GPU support: " FERRY_BUILD_REASON); }
}  // namespace

at::Tensor allocate_device_buffer(int, CudaStreamHandle, size_t) { no_gpu(); }
CudaStreamHandle current_torch_stream(int) { no_gpu(); }
void record_stream(const at::Tensor&, CudaStreamHandle) { no_gpu(); }
void copy_on_stream(const at::Tensor&, const at::Tensor&, int, CudaStreamHandle) { no_gpu(); }
at::Tensor allocate_pinned(at::IntArrayRef, at::ScalarType) { no_gpu(); }

#endif

}  // namespace ferry::detail
