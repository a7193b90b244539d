#include "ferry/pipeline/managed_allocator.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/DispatchKeySet.h>

#include "ferry/build_config.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/unified_memory.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

void delete_managed(void* pointer) { free_managed(pointer); }

}  // namespace

#if FERRY_ALLOCATOR_MUTABLE_ALLOCATE
c10::DataPtr ManagedAllocator::allocate(size_t bytes) {
#else
c10::DataPtr ManagedAllocator::allocate(size_t bytes) const {
#endif
  const int device = require_unified_memory(-1, "ferry::ManagedAllocator");
  void* pointer = allocate_managed(bytes, device, "a tensor from ferry::ManagedAllocator");
  return {pointer, pointer, &delete_managed, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device))};
}

#if FERRY_ALLOCATOR_MUTABLE_ALLOCATE
void ManagedAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count == 0) return;
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDefault));
#else
  (void)dest, (void)src;
  throw Error("ManagedAllocator::copy_data: ferry was built without the CUDA runtime");
#endif
}
#endif

c10::DeleterFnPtr ManagedAllocator::raw_deleter() const { return &delete_managed; }

c10::Allocator* managed_allocator() {
  static ManagedAllocator* const allocator = new ManagedAllocator();  // never destroyed: tensors may outlive statics
  return allocator;
}

at::Tensor empty_managed(at::IntArrayRef sizes, at::ScalarType dtype, int device) {
  require_unified_memory(device, "empty_managed");
  DeviceGuard guard(device);  // the allocator allocates on the current device
  return at::Tensor(at::detail::empty_generic(sizes, managed_allocator(), c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                              dtype, at::MemoryFormat::Contiguous));
}

}  // namespace ferry
