#pragma once

#include <cstddef>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include "ferry/pipeline/cuda_types.h"

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

/// `target.copy_(source, non_blocking=true)` with `stream` as the current stream of `device` (the
/// device whose stream runs the copy: the source's for device-to-host, either one's when both are
/// that device). Used where a raw cudaMemcpyAsync cannot do it: strided (non-contiguous) device
/// tensors. Autograd is off for the copy. Blocks only where libtorch's copy does (pageable host
/// memory); allocates only what libtorch's copy needs internally.
void copy_on_stream(const at::Tensor& target, const at::Tensor& source, int device, CudaStreamHandle stream);

/// A contiguous CPU tensor of `sizes` and `dtype` in page-locked memory from libtorch's pinned
/// (caching host) allocator: reused blocks are cheap, a new block is a cudaHostAlloc (slow, and it
/// may synchronise the device). Thread-safe.
at::Tensor allocate_pinned(at::IntArrayRef sizes, at::ScalarType dtype);

}  // namespace ferry::detail
