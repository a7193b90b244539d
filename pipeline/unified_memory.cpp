#include "ferry/pipeline/unified_memory.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <utility>

#include <torch/nn/module.h>

#include "ferry/build_config.h"
#include "ferry/pipeline/cuda_device.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/torch_cuda.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

std::string device_name(int device) { return device == kCpuDevice ? "the CPU" : "cuda:" + std::to_string(device); }

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    default: return c10::toString(dtype);
  }
}

// "tensor 'weight' (float32 [4, 4] on cuda:0)": the caller's name, then what the tensor is.
std::string describe_tensor(const at::Tensor& tensor, std::string_view name) {
  std::ostringstream out;
  out << name;
  if (!tensor.defined()) {
    out << " (undefined)";
    return out.str();
  }
  out << " (" << dtype_name(tensor.scalar_type()) << " [";
  for (int64_t d = 0; d < tensor.dim(); ++d) out << (d > 0 ? ", " : "") << tensor.size(d);
  out << "] on " << tensor.device().str() << ")";
  return out.str();
}

// The reason unified memory cannot work on `device` (-1: the current one), or "" when it can;
// `resolved` receives the device number checked.
std::string unsupported_reason(int device, int& resolved) {
  resolved = device;
#if FERRY_WITH_GPU && FERRY_HAVE_CUDART
  const int count = cuda_device_count();
  if (count == 0) return cuda_unavailable_reason();
  if (device == -1) {
    const cudaError_t error = cudaGetDevice(&resolved);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      return std::string("no current CUDA device: cudaGetDevice failed with ") + cudaGetErrorName(error);
    }
  }
  if (resolved < 0 || resolved >= count) {
    return "there is no CUDA device " + std::to_string(resolved) + " (this process sees " + std::to_string(count) +
           (count == 1 ? " device)" : " devices)");
  }
  int concurrent = 0;
  const cudaError_t error = cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, resolved);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return "cannot ask cuda:" + std::to_string(resolved) +
           " for cudaDevAttrConcurrentManagedAccess: " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) +
           ")";
  }
  if (concurrent == 0) {
    cudaDeviceProp properties{};
    std::string model;
    if (cudaGetDeviceProperties(&properties, resolved) == cudaSuccess)
      model = std::string(" (") + properties.name + ")";
    (void)cudaGetLastError();
    return "cuda:" + std::to_string(resolved) + model +
           " has no concurrent managed access (cudaDevAttrConcurrentManagedAccess is 0, as on Windows, WSL and GPUs "
           "before Pascal): the host and the GPU cannot use managed memory at the same time";
  }
  return "";
#else
  return "this ferry is a " + build_description() + "; unified memory needs a GPU build";
#endif
}

// Throws UnifiedMemoryUnsupportedError naming `function` where unified memory cannot work on
// `device` (-1: the current device); returns the device checked.
int require(int device, std::string_view function) {
  int resolved = device;
  const std::string reason = unsupported_reason(device, resolved);
  if (!reason.empty()) {
    std::string cause(function);
    if (!cause.empty()) cause += ": ";
    cause += "unified memory is not available: ";
    cause += reason;
    throw UnifiedMemoryUnsupportedError(std::move(cause));
  }
  return resolved;
}

// The checks each operation makes on its target device before touching memory: unified memory
// works there (for the host: on the current device), and the number is a device or the host.
void require_target(int device, std::string_view function, bool gpu_only) {
  if (device < kCpuDevice) {
    require(-1, function);
    throw Error(std::string(function) + ": device " + std::to_string(device) +
                " is neither a GPU (0, 1, ...) nor the CPU (-1)");
  }
  require(device, function);
  if (gpu_only && device == kCpuDevice) {
    throw Error(std::string(function) + ": accessed-by advice needs a GPU, not the CPU (device -1)");
  }
}

#if FERRY_HAVE_CUDART

cudaMemLocation location_of(int device) {
  cudaMemLocation location{};
  if (device == kCpuDevice) {
    location.type = cudaMemLocationTypeHost;
    location.id = 0;
  } else {
    location.type = cudaMemLocationTypeDevice;
    location.id = device;
  }
  return location;
}

int device_of(cudaMemLocationType type, int id) {
  switch (type) {
    case cudaMemLocationTypeDevice: return id;
    case cudaMemLocationTypeHost:
    case cudaMemLocationTypeHostNuma:
    case cudaMemLocationTypeHostNumaCurrent: return kCpuDevice;
    default: return kNoDevice;
  }
}

// The pointer's attributes, or the error the query gave (cleared from the runtime's last-error slot:
// asking about memory CUDA never saw may leave one).
cudaError_t pointer_attributes(const void* pointer, cudaPointerAttributes& attributes) {
  attributes = cudaPointerAttributes{};
  const cudaError_t error = cudaPointerGetAttributes(&attributes, pointer);
  (void)cudaGetLastError();
  return error;
}

// The device managed memory at [pointer, pointer + bytes) was allocated on; refuses memory that is
// not managed at both ends, naming `what` and where its memory is.
int require_managed(const void* pointer, size_t bytes, std::string_view what, std::string_view function) {
  const auto refuse = [&](const void* where) {
    throw Error(std::string(function) + ": " + std::string(what) + " is not in managed memory but in " +
                describe_memory(where) +
                "; only memory from cudaMallocManaged can be prefetched or advised (allocate it with "
                "ferry::allocate_managed, ferry::managed_allocator(), or in Python under "
                "torch.cuda.use_mem_pool(ferry.uvm.create_unified_mempool()))");
  };
  if (pointer == nullptr) refuse(pointer);
  cudaPointerAttributes first{};
  if (pointer_attributes(pointer, first) != cudaSuccess || first.type != cudaMemoryTypeManaged) refuse(pointer);
  const void* last = static_cast<const char*>(pointer) + bytes - 1;
  cudaPointerAttributes end{};
  if (bytes > 1 && (pointer_attributes(last, end) != cudaSuccess || end.type != cudaMemoryTypeManaged)) refuse(last);
  return first.device;
}

#endif

// The device whose context and stream run an operation on managed memory: `device` when it is a
// GPU, else the device the memory was allocated on.
int run_device(const void* pointer, size_t bytes, int device, std::string_view what, std::string_view function) {
#if FERRY_HAVE_CUDART
  const int home = require_managed(pointer, bytes, what, function);
  return device >= 0 ? device : home;
#else
  (void)pointer, (void)bytes, (void)device, (void)what;
  throw Error(std::string(function) + ": ferry was built without the CUDA runtime");
#endif
}

}  // namespace

UnifiedMemorySupport unified_memory_support(int device) {
  UnifiedMemorySupport support;
  try {
    int resolved = device;
    support.reason = unsupported_reason(device, resolved);
  } catch (const std::exception& e) {  // only allocation failures building the text
    support.reason = e.what();
  }
  support.supported = support.reason.empty();
  return support;
}

int require_unified_memory(int device, std::string_view function) { return require(device, function); }

void* allocate_managed(size_t bytes, int device, std::string_view what) {
  const int target = require(device, "allocate_managed");
  if (bytes == 0) return nullptr;
#if FERRY_HAVE_CUDART
  DeviceGuard guard(target);
  size_t free = 0;
  size_t total = 0;
  FERRY_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  const auto refusal = [&](const std::string& why) {
    return ManagedOutOfMemoryError("allocate_managed: " + std::string(what) + ": refusing " +
                                   detail::bytes_text(bytes) + " of managed memory on " + device_name(target) + ": " +
                                   why + " (" + detail::bytes_text(free) + " free of " + detail::bytes_text(total) +
                                   "); ferry never asks for more managed memory than the card has free");
  };
  if (bytes > free) throw refusal("more than the device has free");
  void* pointer = nullptr;
  const cudaError_t error = cudaMallocManaged(&pointer, bytes, cudaMemAttachGlobal);
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw refusal("cudaMallocManaged ran out of memory");
  }
  FERRY_CUDA_CHECK(error);
  try {
    FERRY_CUDA_CHECK(cudaMemAdvise(pointer, bytes, cudaMemAdviseSetPreferredLocation, location_of(target)));
    FERRY_CUDA_CHECK(cudaMemAdvise(pointer, bytes, cudaMemAdviseSetAccessedBy, location_of(target)));
  } catch (...) {
    free_managed(pointer);
    throw;
  }
  return pointer;
#else
  (void)what, (void)target;
  throw Error("allocate_managed: ferry was built without the CUDA runtime");
#endif
}

void free_managed(void* pointer) noexcept {
#if FERRY_HAVE_CUDART
  if (pointer == nullptr) return;
  if (cudaFree(pointer) != cudaSuccess) (void)cudaGetLastError();
#else
  (void)pointer;
#endif
}

bool is_managed_memory(const void* pointer) noexcept {
#if FERRY_HAVE_CUDART
  if (pointer == nullptr) return false;
  cudaPointerAttributes attributes{};
  return pointer_attributes(pointer, attributes) == cudaSuccess && attributes.type == cudaMemoryTypeManaged;
#else
  (void)pointer;
  return false;
#endif
}

std::string describe_memory(const void* pointer) {
  if (pointer == nullptr) return "a null pointer";
#if FERRY_HAVE_CUDART
  cudaPointerAttributes attributes{};
  const cudaError_t error = pointer_attributes(pointer, attributes);
  if (error != cudaSuccess) {
    return std::string("memory CUDA cannot describe (cudaPointerGetAttributes failed with ") + cudaGetErrorName(error) +
           ")";
  }
  switch (attributes.type) {
    case cudaMemoryTypeManaged: return "managed memory";
    case cudaMemoryTypeDevice: return "device memory on cuda:" + std::to_string(attributes.device);
    case cudaMemoryTypeHost: return "pinned host memory";
    case cudaMemoryTypeUnregistered: return "pageable host memory (unknown to CUDA)";
  }
  return "memory of unknown CUDA type " + std::to_string(static_cast<int>(attributes.type));
#else
  return "host memory (ferry was built without the CUDA runtime)";
#endif
}

void prefetch_managed(const void* pointer, size_t bytes, int device, CudaStreamHandle stream, std::string_view what) {
  static constexpr std::string_view kFunction = "prefetch_managed";
  require_target(device, kFunction, /*gpu_only=*/false);
  if (bytes == 0) return;
  DeviceGuard guard(run_device(pointer, bytes, device, what, kFunction));
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(cudaMemPrefetchAsync(pointer, bytes, location_of(device), 0, stream));
#else
  (void)stream;
#endif
}

void advise_managed_preferred_location(const void* pointer, size_t bytes, int device, std::string_view what) {
  static constexpr std::string_view kFunction = "advise_managed_preferred_location";
  require_target(device, kFunction, /*gpu_only=*/false);
  if (bytes == 0) return;
  DeviceGuard guard(run_device(pointer, bytes, device, what, kFunction));
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(cudaMemAdvise(pointer, bytes, cudaMemAdviseSetPreferredLocation, location_of(device)));
#endif
}

void advise_managed_accessed_by(const void* pointer, size_t bytes, int device, std::string_view what) {
  static constexpr std::string_view kFunction = "advise_managed_accessed_by";
  require_target(device, kFunction, /*gpu_only=*/true);
  if (bytes == 0) return;
  DeviceGuard guard(run_device(pointer, bytes, device, what, kFunction));
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(cudaMemAdvise(pointer, bytes, cudaMemAdviseSetAccessedBy, location_of(device)));
#endif
}

ManagedRangeAttributes managed_range_attributes(const void* pointer, size_t bytes) {
  static constexpr std::string_view kFunction = "managed_range_attributes";
  require(-1, kFunction);
  ManagedRangeAttributes out;
  if (bytes == 0) return out;
  DeviceGuard guard(run_device(pointer, bytes, kCpuDevice, "the range", kFunction));
#if FERRY_HAVE_CUDART
  const auto location = [&](cudaMemRangeAttribute type_attribute, cudaMemRangeAttribute id_attribute) {
    cudaMemLocationType type = cudaMemLocationTypeInvalid;
    int id = kNoDevice;
    FERRY_CUDA_CHECK(cudaMemRangeGetAttribute(&type, sizeof type, type_attribute, pointer, bytes));
    FERRY_CUDA_CHECK(cudaMemRangeGetAttribute(&id, sizeof id, id_attribute, pointer, bytes));
    return device_of(type, id);
  };
  out.preferred_location =
      location(cudaMemRangeAttributePreferredLocationType, cudaMemRangeAttributePreferredLocationId);
  out.last_prefetch_location =
      location(cudaMemRangeAttributeLastPrefetchLocationType, cudaMemRangeAttributeLastPrefetchLocationId);
  // One slot per device; the unused ones come back as cudaInvalidDeviceId.
  std::vector<int> devices(static_cast<size_t>(std::max(cuda_device_count(), 1)), kNoDevice);
  FERRY_CUDA_CHECK(cudaMemRangeGetAttribute(devices.data(), devices.size() * sizeof(int),
                                            cudaMemRangeAttributeAccessedBy, pointer, bytes));
  for (int device : devices) {
    if (device >= 0) out.accessed_by.push_back(device);
  }
  std::sort(out.accessed_by.begin(), out.accessed_by.end());
#endif
  return out;
}

MemorySpan memory_span(const at::Tensor& tensor) noexcept {
  if (!tensor.defined()) return {};
  MemorySpan span{tensor.data_ptr(), 0};
  if (tensor.numel() == 0) return span;
  // libtorch's strides are never negative: the last element is at the sum of (size - 1) * stride.
  int64_t last = 0;
  for (int64_t d = 0; d < tensor.dim(); ++d) last += (tensor.size(d) - 1) * tensor.stride(d);
  span.bytes = static_cast<size_t>(last + 1) * tensor.element_size();
  return span;
}

void prefetch_managed_tensor(const at::Tensor& tensor, int device, std::optional<CudaStreamHandle> stream,
                             std::string_view name) {
  static constexpr std::string_view kFunction = "prefetch_managed_tensor";
  require_target(device, kFunction, /*gpu_only=*/false);
  const MemorySpan span = memory_span(tensor);
  if (span.bytes == 0) return;
  const std::string what = describe_tensor(tensor, name);
  const int runs_on = run_device(span.pointer, span.bytes, device, what, kFunction);
  prefetch_managed(span.pointer, span.bytes, device, stream ? *stream : detail::current_torch_stream(runs_on), what);
}

void advise_managed_tensor_preferred_location(const at::Tensor& tensor, int device, std::string_view name) {
  require_target(device, "advise_managed_tensor_preferred_location", /*gpu_only=*/false);
  const MemorySpan span = memory_span(tensor);
  if (span.bytes > 0)
    advise_managed_preferred_location(span.pointer, span.bytes, device, describe_tensor(tensor, name));
}

void advise_managed_tensor_accessed_by(const at::Tensor& tensor, int device, std::string_view name) {
  require_target(device, "advise_managed_tensor_accessed_by", /*gpu_only=*/true);
  const MemorySpan span = memory_span(tensor);
  if (span.bytes > 0) advise_managed_accessed_by(span.pointer, span.bytes, device, describe_tensor(tensor, name));
}

ManagedRangeAttributes managed_tensor_attributes(const at::Tensor& tensor, std::string_view name) {
  static constexpr std::string_view kFunction = "managed_tensor_attributes";
  require(-1, kFunction);
  const MemorySpan span = memory_span(tensor);
  if (span.bytes == 0) return {};
  run_device(span.pointer, span.bytes, kCpuDevice, describe_tensor(tensor, name), kFunction);  // refuses unmanaged
  return managed_range_attributes(span.pointer, span.bytes);
}

namespace {

// Calls `act(tensor, name)` for each managed parameter (and buffer) of `module` once, skipping and
// counting the others.
template <typename Act>
ManagedModuleResult for_each_managed(const torch::nn::Module& module, bool include_buffers, Act act) {
  ManagedModuleResult result;
  std::set<std::pair<const void*, size_t>> seen;
  const auto visit = [&](const std::string& name, const at::Tensor& tensor, std::string_view kind) {
    const MemorySpan span = memory_span(tensor);
    if (span.bytes == 0 || !seen.insert({span.pointer, span.bytes}).second) return;
    if (!is_managed_memory(span.pointer)) {
      ++result.skipped;
      result.skipped_names.push_back(name);
      return;
    }
    act(tensor, std::string(kind) + " '" + name + "'");
    result.bytes += span.bytes;
    ++result.tensors;
  };
  for (const auto& item : module.named_parameters(/*recurse=*/true)) visit(item.key(), item.value(), "parameter");
  if (include_buffers) {
    for (const auto& item : module.named_buffers(/*recurse=*/true)) visit(item.key(), item.value(), "buffer");
  }
  return result;
}

}  // namespace

ManagedModuleResult prefetch_managed_module_parameters(const torch::nn::Module& module, int device,
                                                       bool include_buffers, std::optional<CudaStreamHandle> stream) {
  require_target(device, "prefetch_managed_module_parameters", /*gpu_only=*/false);
  return for_each_managed(module, include_buffers, [&](const at::Tensor& tensor, const std::string& name) {
    prefetch_managed_tensor(tensor, device, stream, name);
  });
}

ManagedModuleResult advise_managed_module_parameters_preferred_location(const torch::nn::Module& module, int device,
                                                                        bool include_buffers) {
  require_target(device, "advise_managed_module_parameters_preferred_location", /*gpu_only=*/false);
  return for_each_managed(module, include_buffers, [&](const at::Tensor& tensor, const std::string& name) {
    advise_managed_tensor_preferred_location(tensor, device, name);
  });
}

namespace detail {
// "2147483648 bytes (2.0 GiB)": exact for the reader who compares, rounded for the one who skims.
std::string bytes_text(size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char rounded[32];
  std::snprintf(rounded, sizeof rounded, "%.1f %s", value, kUnits[unit]);
  return std::to_string(bytes) + " bytes (" + rounded + ")";
}
}  // namespace detail

}  // namespace ferry
