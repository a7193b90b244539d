#pragma once

#include <cstddef>

#include <torch/csrc/utils/pybind.h>

#include <ferry/pipeline/cuda_types.h>

namespace ferry::python {

/// ferry.uvm's compiled part (python/ferry/uvm.py wraps it): unified-memory support, the tensor
/// helpers of pipeline/unified_memory.h, and the allocator functions below that
/// torch.cuda.memory.CUDAPluggableAllocator loads from this extension for ferry.uvm's MemPool.
/// Adds ferry._C.uvm_* to `module`. The helpers release the GIL while CUDA works.
void bind_uvm(pybind11::module_& module);

}  // namespace ferry::python

// The allocator torch.cuda.memory.CUDAPluggableAllocator(ferry._C.__file__, "ferry_uvm_malloc",
// "ferry_uvm_free") calls: exported with C linkage and default visibility, so that ctypes finds them
// in the extension. torch calls ferry_uvm_malloc from its caching allocator when a MemPool of this
// allocator needs a new segment (the size is already rounded up), on the device being allocated
// for. It returns allocate_managed()'s memory (preferred location and accessed-by that device). A
// request larger than the device's free memory throws c10::OutOfMemoryError with ferry's message,
// which Python sees as torch.OutOfMemoryError: torch's allocator lets the exception through instead
// of retrying after freeing its cache and reporting its own generic message, as it would for a
// nullptr. Any other failure throws c10::Error (RuntimeError in Python).
extern "C" __attribute__((visibility("default"))) void* ferry_uvm_malloc(std::size_t size, int device,
                                                                         ferry::CudaStreamHandle stream);
// Frees what ferry_uvm_malloc returned (cudaFree). Never throws.
extern "C" __attribute__((visibility("default"))) void ferry_uvm_free(void* pointer, std::size_t size, int device,
                                                                      ferry::CudaStreamHandle stream);
