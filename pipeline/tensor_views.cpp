#include "ferry/pipeline/tensor_views.h"

#include <utility>

#include <c10/core/TensorImpl.h>
#include <c10/core/TensorOptions.h>

#include "ferry/pipeline/error.h"

namespace ferry {

at::Tensor make_view(c10::Storage storage, at::Device device, at::ScalarType dtype, size_t byte_offset,
                     at::IntArrayRef sizes) {
  const size_t element = c10::elementSize(dtype);
  if (byte_offset % element != 0) {
    throw Error("view offset " + std::to_string(byte_offset) + " is not a multiple of the element size " +
                std::to_string(element));
  }
  size_t numel = 1;
  for (int64_t size : sizes) {
    if (size < 0) throw Error("view with a negative size");
    numel *= static_cast<size_t>(size);
  }
  if (byte_offset + numel * element > storage.nbytes()) {
    throw Error("view of " + std::to_string(numel * element) + " bytes at offset " + std::to_string(byte_offset) +
                " exceeds its buffer of " + std::to_string(storage.nbytes()) + " bytes");
  }
  const auto key = c10::computeDispatchKey(dtype, c10::kStrided, device);
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                         c10::scalarTypeToTypeMeta(dtype));
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  tensor.unsafeGetTensorImpl()->set_storage_offset(static_cast<int64_t>(byte_offset / element));
  return tensor;
}

}  // namespace ferry
