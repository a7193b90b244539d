#pragma once

#include <cstddef>

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <torch/version.h>

// libtorch 2.3 made c10::Allocator::allocate non-const and added the pure virtual copy_data().
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define FERRY_ALLOCATOR_MUTABLE_ALLOCATE 1
#else
#define FERRY_ALLOCATOR_MUTABLE_ALLOCATE 0
#endif

namespace ferry {

/// A c10::Allocator of CUDA managed memory (pipeline/unified_memory.h): each allocation is an
/// allocate_managed() on the calling thread's current CUDA device — so preferred location and
/// accessed-by are that device, and a request larger than its free memory is refused with
/// ManagedOutOfMemoryError — and its DataPtr says cuda:N, so tensors made with it are CUDA tensors
/// whose pages the driver can also move to the host. Freed with free_managed(). No caching: every
/// allocation is a cudaMallocManaged, every free a cudaFree (both synchronous); meant for long-lived
/// tensors such as weights, not per-step temporaries.
///
/// Stateless and thread-safe. Throws UnifiedMemoryUnsupportedError where unified memory cannot work.
class ManagedAllocator final : public c10::Allocator {
 public:
#if FERRY_ALLOCATOR_MUTABLE_ALLOCATE
  c10::DataPtr allocate(size_t bytes) override;
  /// cudaMemcpy (cudaMemcpyDefault) between two managed ranges; blocks until done.
  void copy_data(void* dest, const void* src, std::size_t count) const override;
#else
  c10::DataPtr allocate(size_t bytes) const override;
#endif
  c10::DeleterFnPtr raw_deleter() const override;
};

/// The process-wide ManagedAllocator (never destroyed).
c10::Allocator* managed_allocator();

/// An uninitialised contiguous CUDA tensor on `device` in managed memory from managed_allocator().
/// Throws UnifiedMemoryUnsupportedError where unsupported, ManagedOutOfMemoryError when the device
/// has less free memory than the tensor needs. Blocks: briefly (cudaMallocManaged). Thread-safe.
at::Tensor empty_managed(at::IntArrayRef sizes, at::ScalarType dtype, int device);

}  // namespace ferry
