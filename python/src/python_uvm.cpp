#include "python_uvm.h"

#include <exception>
#include <optional>
#include <string>

#include <c10/util/Exception.h>

#include <ferry/pipeline/unified_memory.h>

namespace py = pybind11;

void* ferry_uvm_malloc(std::size_t size, int device, ferry::CudaStreamHandle /*stream*/) {
  // Managed memory is not stream-ordered: the stream torch allocates for does not matter.
  try {
    return ferry::allocate_managed(size, device, "a torch.cuda.MemPool segment (ferry.uvm.create_unified_mempool)");
  } catch (const ferry::ManagedOutOfMemoryError& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  return nullptr;  // not reached
}

void ferry_uvm_free(void* pointer, std::size_t /*size*/, int /*device*/, ferry::CudaStreamHandle /*stream*/) {
  ferry::free_managed(pointer);
}

namespace ferry::python {
namespace {

std::optional<CudaStreamHandle> stream_from(const std::optional<uintptr_t>& handle) {
  if (!handle) return std::nullopt;
  return reinterpret_cast<CudaStreamHandle>(*handle);
}

}  // namespace

void bind_uvm(py::module_& module) {
  module.def(
      "uvm_support",
      [](int device) {
        const UnifiedMemorySupport support = unified_memory_support(device);
        return py::make_tuple(support.supported, support.reason);
      },
      py::arg("device"), "(supported, reason): whether unified memory works on the device (-1: the current one).");
  module.def(
      "uvm_require", [](int device, const std::string& function) { return require_unified_memory(device, function); },
      py::arg("device"), py::arg("function"),
      "Raises UnifiedMemoryUnsupportedError('<function>: ...') where unsupported; returns the device checked.");
  module.def(
      "uvm_is_managed", [](const at::Tensor& tensor) { return is_managed_memory(memory_span(tensor).pointer); },
      py::arg("tensor"));
  module.def(
      "uvm_describe_memory", [](const at::Tensor& tensor) { return describe_memory(memory_span(tensor).pointer); },
      py::arg("tensor"));
  module.def(
      "uvm_span_bytes", [](const at::Tensor& tensor) { return memory_span(tensor).bytes; }, py::arg("tensor"));
  module.def(
      "uvm_prefetch_tensor",
      [](const at::Tensor& tensor, int device, std::optional<uintptr_t> stream, const std::string& name) {
        prefetch_managed_tensor(tensor, device, stream_from(stream), name);
      },
      py::arg("tensor"), py::arg("device"), py::arg("stream"), py::arg("name"),
      py::call_guard<py::gil_scoped_release>());
  module.def(
      "uvm_advise_preferred_location",
      [](const at::Tensor& tensor, int device, const std::string& name) {
        advise_managed_tensor_preferred_location(tensor, device, name);
      },
      py::arg("tensor"), py::arg("device"), py::arg("name"), py::call_guard<py::gil_scoped_release>());
  module.def(
      "uvm_advise_accessed_by",
      [](const at::Tensor& tensor, int device, const std::string& name) {
        advise_managed_tensor_accessed_by(tensor, device, name);
      },
      py::arg("tensor"), py::arg("device"), py::arg("name"), py::call_guard<py::gil_scoped_release>());
  module.def(
      "uvm_tensor_attributes",
      [](const at::Tensor& tensor, const std::string& name) {
        ManagedRangeAttributes attributes;
        {
          py::gil_scoped_release unlocked;
          attributes = managed_tensor_attributes(tensor, name);
        }
        py::dict out;
        out["preferred_location"] = attributes.preferred_location;
        out["last_prefetch_location"] = attributes.last_prefetch_location;
        out["accessed_by"] = attributes.accessed_by;
        return out;
      },
      py::arg("tensor"), py::arg("name"));
}

}  // namespace ferry::python
