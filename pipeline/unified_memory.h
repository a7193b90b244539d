#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/pipeline/cuda_types.h"
#include "ferry/pipeline/error.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

// CUDA unified (managed) memory: memory from cudaMallocManaged that the driver migrates between the
// host and the GPUs page by page, at the same address. These helpers allocate it, move it ahead of
// use (prefetch) and tell the driver where it should live (advice), for tensors and whole modules:
// weights that do not all fit on the card, kept on the host and paged in when used, or offloaded
// between phases without changing their addresses (so captured CUDA graphs stay valid).
//
// Where unified memory cannot work — a CPU build of ferry, no CUDA device, or a device without
// concurrent managed access (cudaDevAttrConcurrentManagedAccess 0: Windows, WSL, pre-Pascal GPUs) —
// every function below except unified_memory_support(), is_managed_memory(), describe_memory(),
// memory_span() and free_managed() throws UnifiedMemoryUnsupportedError with the reason, before it
// does anything else.
//
// Device numbers: 0, 1, ... are GPUs; kCpuDevice (-1) is the host (the CPU), as CUDA's
// cudaCpuDeviceId. Every function that touches a device makes it current first (a DeviceGuard) and
// checks every CUDA call (ferry::CudaError names the failed call). All of them are thread-safe (they
// keep no state) and none blocks on the GPU's work: prefetches are queued on a stream, advice and
// attribute reads are immediate, and only allocation and freeing synchronise as cudaMallocManaged
// and cudaFree do. docs/unified-memory.md describes the Python side (ferry.uvm).
namespace ferry {

/// The host as a prefetch target or preferred location (CUDA's cudaCpuDeviceId).
inline constexpr int kCpuDevice = -1;
/// No location: a range whose pages disagree, or that never had the advice or prefetch asked about
/// (CUDA's cudaInvalidDeviceId).
inline constexpr int kNoDevice = -2;

/// Unified memory cannot work here; what() says why (a CPU build, no device, no concurrent managed
/// access). Python: ferry.uvm.UnifiedMemoryUnsupportedError, a subclass of ferry.Error.
class UnifiedMemoryUnsupportedError : public Error {
 public:
  using Error::Error;
};

/// allocate_managed() refused a request larger than the device's free memory, or cudaMallocManaged
/// ran out of memory; what() names the request, the bytes asked for and the device's free bytes.
/// Through torch.cuda.MemPool (ferry.uvm.create_unified_mempool) it reaches Python as
/// torch.OutOfMemoryError with the same message.
class ManagedOutOfMemoryError : public Error {
 public:
  using Error::Error;
};

/// Whether unified memory can work on a device, and why not.
struct UnifiedMemorySupport {
  bool supported = false;
  std::string reason;  // "" when supported
};

/// Whether unified memory works on `device` (-1: the calling thread's current device). Checks, in
/// order: a GPU build of ferry, a CUDA device at all, the device number, and the device's
/// cudaDevAttrConcurrentManagedAccess. Never throws. Blocks: no (the first call of a process may
/// initialise the CUDA runtime). Thread-safe.
UnifiedMemorySupport unified_memory_support(int device = -1);

/// Throws UnifiedMemoryUnsupportedError when unified memory cannot work on `device` (-1: the current
/// one): "unified memory is not available: <unified_memory_support(device).reason>", after
/// "<function>: " when `function` is given. Returns the device checked (the current one for -1).
int require_unified_memory(int device, std::string_view function = {});

/// `bytes` of managed memory (cudaMallocManaged, attached globally) on `device` (-1: the current
/// one), advised to prefer `device` as its location and to be accessed by it, so the GPU maps it at
/// once and pages settle there. Returns nullptr for 0 bytes. Release with free_managed().
///
/// Refuses, with ManagedOutOfMemoryError naming `what`, the bytes asked for and the device's free
/// bytes (cudaMemGetInfo), any request larger than the device's free memory: managed memory could be
/// oversubscribed, but ferry never asks for more than the card has free. Throws
/// UnifiedMemoryUnsupportedError where unsupported, CudaError when a CUDA call fails.
/// Blocks: briefly (cudaMallocManaged is synchronous). Allocates: yes. Thread-safe.
void* allocate_managed(size_t bytes, int device, std::string_view what = "managed memory");

/// cudaFree of managed memory from allocate_managed(); null is ignored. Never throws (a failure is
/// dropped: there is nothing a caller could do). Blocks: cudaFree may synchronise the device.
void free_managed(void* pointer) noexcept;

/// Whether `pointer` points into managed memory (cudaPointerGetAttributes). Never throws; false
/// without a CUDA runtime or device.
bool is_managed_memory(const void* pointer) noexcept;

/// Where `pointer`'s memory is, for messages: "managed memory", "device memory on cuda:0",
/// "pinned host memory", "pageable host memory (unknown to CUDA)", "a null pointer", or why CUDA
/// cannot say. Never throws. Blocks: no. Thread-safe.
std::string describe_memory(const void* pointer);

/// Prefetches [pointer, pointer + bytes) of managed memory to `device` (kCpuDevice: the host) on
/// `stream`, which must belong to the device the prefetch runs on: `device`, or for the host the
/// device the memory was allocated on. Asynchronous: the pages move in stream order; the addresses
/// stay the same. 0 bytes do nothing. Memory that is not managed is refused with ferry::Error
/// naming `what` and describe_memory(). Blocks: no. Thread-safe.
void prefetch_managed(const void* pointer, size_t bytes, int device, CudaStreamHandle stream, std::string_view what);

/// cudaMemAdviseSetPreferredLocation: the pages of the range should live on `device` (kCpuDevice:
/// the host). A hint: nothing moves now. Refuses memory that is not managed. Blocks: no.
void advise_managed_preferred_location(const void* pointer, size_t bytes, int device, std::string_view what);

/// cudaMemAdviseSetAccessedBy: `device` (a GPU; kCpuDevice is refused with ferry::Error) keeps the
/// range mapped, so its first touch does not fault. Refuses memory that is not managed. Blocks: no.
void advise_managed_accessed_by(const void* pointer, size_t bytes, int device, std::string_view what);

/// The advice and last prefetch of a managed range, read back (cudaMemRangeGetAttribute).
struct ManagedRangeAttributes {
  int preferred_location = kNoDevice;      // a GPU, kCpuDevice, or kNoDevice (none, or pages disagree)
  int last_prefetch_location = kNoDevice;  // where it was last prefetched (asked, not necessarily done)
  std::vector<int> accessed_by;            // GPUs with accessed-by advice for the whole range, ascending
};

/// The attributes of [pointer, pointer + bytes) of managed memory; refuses other memory as the
/// functions above do. Blocks: no. Thread-safe.
ManagedRangeAttributes managed_range_attributes(const void* pointer, size_t bytes);

/// The bytes a tensor's elements occupy: from its first element (data_ptr) to the end of its last
/// one. A contiguous tensor: exactly nbytes(). A view with gaps (a stride-2 slice, a transposed
/// non-contiguous view): every byte between its first and last element, including the gaps, since
/// pages are what moves. An empty tensor: {data_ptr, 0}. Never throws.
struct MemorySpan {
  const void* pointer = nullptr;
  size_t bytes = 0;
};
MemorySpan memory_span(const at::Tensor& tensor) noexcept;

/// The tensor forms: the range is memory_span(tensor); `name` names it in errors, completed with
/// its dtype, shape and device ("tensor 'weight' (float32 [4, 4] on cuda:0)"). A tensor that is not
/// in managed memory is refused with ferry::Error saying where its memory is; an empty one does
/// nothing. `stream` nullopt: libtorch's current stream of the device the prefetch runs on.
void prefetch_managed_tensor(const at::Tensor& tensor, int device,
                             std::optional<CudaStreamHandle> stream = std::nullopt, std::string_view name = "tensor");
void advise_managed_tensor_preferred_location(const at::Tensor& tensor, int device, std::string_view name = "tensor");
void advise_managed_tensor_accessed_by(const at::Tensor& tensor, int device, std::string_view name = "tensor");
ManagedRangeAttributes managed_tensor_attributes(const at::Tensor& tensor, std::string_view name = "tensor");

/// What a module helper did: the bytes and tensors it handled, and the tensors it skipped because
/// they are not in managed memory (by their names in the module, "fc.weight").
struct ManagedModuleResult {
  size_t bytes = 0;
  size_t tensors = 0;
  size_t skipped = 0;
  std::vector<std::string> skipped_names;
};

/// prefetch_managed_tensor() over every parameter of `module` and its submodules (and their buffers
/// with `include_buffers`). Parameters that are not in managed memory are skipped and counted, not
/// refused; undefined and empty tensors are passed over; a tensor registered twice (tied weights)
/// counts once. Asynchronous, as prefetch_managed(). Not thread-safe against changes to the module.
ManagedModuleResult prefetch_managed_module_parameters(const torch::nn::Module& module, int device,
                                                       bool include_buffers = false,
                                                       std::optional<CudaStreamHandle> stream = std::nullopt);

/// advise_managed_tensor_preferred_location() over the module's parameters (and buffers), skipping
/// and counting those not in managed memory, as above.
ManagedModuleResult advise_managed_module_parameters_preferred_location(const torch::nn::Module& module, int device,
                                                                        bool include_buffers = false);

namespace detail {
/// "2147483648 bytes (2.0 GiB)", for messages about memory sizes (the dataset cache's too).
std::string bytes_text(size_t bytes);
}  // namespace detail

}  // namespace ferry
