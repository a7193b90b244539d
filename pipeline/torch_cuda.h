#pragma once

#include <cstddef>

#include <ATen/core/Tensor.h>

#include "pipeline/cuda_types.h"

// The few places where ferry needs libtorch's CUDA side (c10/cuda): its caching allocator and its
// notion of the current stream. Everything else uses the CUDA runtime directly. In builds without
// GPU support these throw ferry::Error explaining why.
namespace ferry::detail {

/// `bytes` of device memory on `device` from libtorch's caching allocator, allocated as if on
/// `stream`: the allocator then orders the block's reuse after `stream`'s work, which is where
/// ferry's copies into it run. Blocks only if the allocator must cudaMalloc.
at::Tensor allocate_device_buffer(int device, CudaStreamHandle stream, size_t bytes);

/// libtorch's current CUDA stream for `device` on the calling thread (what the consumer's kernels
/// will run on). Does not block.
CudaStreamHandle current_torch_stream(int device);

/// Tells libtorch's allocator that `stream` uses `buffer`'s memory, so the memory is not reused
/// before that stream's work queued so far has finished. Does not block.
void record_stream(const at::Tensor& buffer, CudaStreamHandle stream);

}  // namespace ferry::detail
