#include "ferry/copy/copy_submission.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>

#include "ferry/build_config.h"
#include "ferry/copy/copy_options.h"
#include "ferry/copy/copy_streams.h"
#include "ferry/copy/packed_chunks.h"
#include "ferry/copy/tensor_copy.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/cuda_event.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/fault_injection.h"
#include "ferry/pipeline/tensor_views.h"
#include "ferry/pipeline/torch_cuda.h"
#include "ferry/stages/parallel_copy.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

// Note [how TensorCopy moves a tensor]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Per input, with "target" the device of the call:
//
//  * already on the target: returned as is (the same tensor; no copy). CPU to CPU is always this.
//  * CPU to CUDA, contiguous, at most kMaxPackedTensorBytes and max_packed_chunk_bytes, with
//    pack_cpu_tensors: packed. Such tensors are laid out greedily in input order into chunks
//    (plan_packed_chunks), each chunk's bytes copied into one staging buffer by run_copies
//    (oneTBB threads for large chunks), then ONE cudaMemcpyAsync per chunk into one device buffer;
//    the results are views of that buffer. Small copies cost mostly their fixed overhead (a few
//    microseconds each), so thousands of them become a handful.
//  * other CPU to CUDA (large, strided, or packing off): with use_pinned_staging a contiguous
//    pinned copy then an asynchronous copy (an input already pinned and contiguous is copied from
//    in place); without it, straight from pageable memory (a strided input is first made
//    contiguous), which the CUDA runtime stages itself, blocking this thread.
//  * CUDA to CPU: into a pinned result with use_pinned_staging (the copy is truly asynchronous),
//    else a pageable one. A strided input is first made contiguous on its own device.
//  * CUDA to another CUDA device: a peer copy on the target's copy stream into a result allocated
//    there, after the same contiguity step on the source.
//
// Ordering: the inputs may still be written by kernels the caller queued, so start() records an
// event on the caller's current stream of each source device, and every copy stream waits on it
// before reading (Note [streams of a TensorCopy]).

// Note [streams of a TensorCopy]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Copies run on ferry's copy stream of one device: the target's for host-to-device and peer
// copies, the source's for device-to-host copies and for making a strided device tensor
// contiguous. Device buffers are allocated "on" the stream that writes them, so libtorch's
// allocator orders their reuse after it. After the last copy on each stream, one event is
// recorded: wait() makes the caller's stream wait on them (a CUDA target) or blocks on them (a CPU
// target), ready() queries them, and the destructor blocks on them before the staging buffers and
// inputs it owns may be freed. If a submission fails half way, the copies already queued are still
// covered by those events, so nothing is freed under them.

namespace ferry::detail {

namespace {

// A staging copy at least this large is split over oneTBB's threads (the pipeline's default).
constexpr size_t kParallelPackBytes = size_t{1} << 20;

// Contiguous bytes that mean the tensor's values as they are (no lazy conjugate or negation bit).
bool plain_contiguous(const at::Tensor& tensor) {
  return tensor.is_contiguous() && !tensor.is_conj() && !tensor.is_neg();
}

std::byte* bytes_of(const at::Tensor& tensor) { return static_cast<std::byte*>(tensor.data_ptr()); }

enum class Direction { kHostToDevice, kDeviceToHost };

void copy_async(void* target, const void* source, size_t bytes, Direction direction, CudaStreamHandle stream) {
  if (bytes == 0) return;
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(detail::fault_fires(Fault::kTransferCopy)  // Note [fault injection]
                       ? cudaErrorUnknown
                       : cudaMemcpyAsync(target, source, bytes,
                                         direction == Direction::kHostToDevice ? cudaMemcpyHostToDevice
                                                                               : cudaMemcpyDeviceToHost,
                                         stream));
#else
  (void)target, (void)source, (void)direction, (void)stream;
  throw Error("cannot copy between host and device: ferry was built without the CUDA runtime");
#endif
}

void copy_peer_async(void* target, int target_device, const void* source, int source_device, size_t bytes,
                     CudaStreamHandle stream) {
  if (bytes == 0) return;
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(cudaMemcpyPeerAsync(target, target_device, source, source_device, bytes, stream));
#else
  (void)target, (void)target_device, (void)source, (void)source_device, (void)stream;
  throw Error("cannot copy between devices: ferry was built without the CUDA runtime");
#endif
}

}  // namespace

std::string tensor_text(const TensorCopyState& state, size_t i) {
  return "tensor " + std::to_string(i) + " of " + std::to_string(state.inputs.size()) + " (" +
         describe_tensor(state.inputs[i]) + ")";
}

void CopySubmission::run() {
  const size_t count = state_.inputs.size();
  state_.results.resize(count);
  std::vector<size_t> from_device;  // CUDA sources: to the CPU or to another device
  std::vector<size_t> packed;       // small CPU tensors to a CUDA target
  std::vector<size_t> to_device;    // the other CPU tensors to a CUDA target
  for (size_t i = 0; i < count; ++i) {
    focus(i);
    const at::Tensor& tensor = state_.inputs[i];
    if (!tensor.defined()) throw Error("the tensor is undefined");
    if (tensor.layout() != at::kStrided) throw Error("only dense (strided) tensors can be copied");
    if (tensor.device() == state_.target) {
      state_.results[i] = tensor;
      ++state_.plan.reused;
    } else if (tensor.is_cuda()) {
      from_device.push_back(i);
    } else if (!tensor.is_cpu()) {
      throw Error("tensors on " + tensor.device().str() + " cannot be copied; only cpu and cuda tensors can");
    } else if (packable(tensor)) {
      packed.push_back(i);
    } else {
      to_device.push_back(i);
    }
  }
  // Device sources first: they need no CPU work, so the copy engines start while the CPU packs.
  for (size_t i : from_device) {
    focus(i);
    copy_from_device(i);
  }
  pack(packed);
  for (size_t i : to_device) {
    focus(i);
    copy_to_device(i);
  }
}

void CopySubmission::protect() {
  std::exception_ptr failure;
  for (int device : used_) {
    const CudaStreamHandle stream = CopyStreams::stream(device);
    try {
      std::shared_ptr<CudaEvent> done = CopyStreams::events(device)->acquire();
      done->record(stream);
      state_.copies_done.push_back(std::move(done));
    } catch (...) {
      if (!failure) failure = std::current_exception();
#if FERRY_HAVE_CUDART
      try {
        DeviceGuard guard(device);
        if (cudaStreamSynchronize(stream) != cudaSuccess) (void)cudaGetLastError();
      } catch (...) {
        // The device cannot even be selected: nothing more can be done for its stream.
      }
#endif
    }
  }
  if (failure) std::rethrow_exception(failure);
}

std::exception_ptr CopySubmission::placed(const std::exception_ptr& failure) const noexcept {
  try {
    return std::make_exception_ptr(
        Error(ErrorContext{"copy"}, focus_text() + " to " + state_.target.str() + ": " + cause_of(failure)));
  } catch (...) {
    return failure;  // out of memory while describing it: the original says something still
  }
}

bool CopySubmission::packable(const at::Tensor& tensor) const {
  const size_t bytes = tensor.nbytes();
  return state_.options.pack_cpu_tensors && plain_contiguous(tensor) && bytes <= kMaxPackedTensorBytes &&
         bytes <= state_.options.max_packed_chunk_bytes;
}

void CopySubmission::focus(size_t i) {
  focus_ = i;
  focus_chunk_ = nullptr;
}

std::string CopySubmission::focus_text() const {
  if (!focus_) return "the copy";
  if (focus_chunk_ == nullptr) return tensor_text(state_, *focus_);
  const std::string of = " of " + std::to_string(state_.inputs.size());
  const std::vector<size_t>& members = *focus_chunk_;
  std::string text = "packed chunk " + std::to_string(focus_chunk_index_) + " (tensors ";
  const size_t shown = std::min<size_t>(members.size(), 8);
  for (size_t m = 0; m < shown; ++m) text += (m == 0 ? "" : ", ") + std::to_string(members[m]);
  if (shown < members.size()) text += ", ... " + std::to_string(members.size()) + " in all";
  return text + of + ")";
}

CudaStreamHandle CopySubmission::use(int device) {
  if (std::find(used_.begin(), used_.end(), device) == used_.end()) used_.push_back(device);
  return CopyStreams::stream(device);
}

void CopySubmission::wait_for_inputs(int device, int source) {
  if (!waited_.insert({device, source}).second) return;
  state_.inputs_ready.at(source)->wait_on(CopyStreams::stream(device));
}

at::Tensor CopySubmission::device_tensor(const at::Tensor& like, int device, CudaStreamHandle stream,
                                         at::Tensor& buffer) {
  buffer = detail::allocate_device_buffer(device, stream, like.nbytes());
  return make_view(buffer.storage(), at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)), like.scalar_type(),
                   0, like.sizes());
}

at::Tensor CopySubmission::host_tensor(const at::Tensor& like) const {
  if (state_.options.use_pinned_staging) return detail::allocate_pinned(like.sizes(), like.scalar_type());
  return at::empty(like.sizes(), at::TensorOptions().dtype(like.scalar_type()));
}

at::Tensor CopySubmission::contiguous_on_device(const at::Tensor& input) {
  if (plain_contiguous(input)) return input;
  const int source = input.get_device();
  const CudaStreamHandle stream = use(source);
  wait_for_inputs(source, source);
  at::Tensor buffer;
  at::Tensor temporary = device_tensor(input, source, stream, buffer);
  detail::copy_on_stream(temporary, input, source, stream);
  state_.keep_alive.push_back(buffer);
  return temporary;
}

void CopySubmission::copy_from_device(size_t i) {
  const at::Tensor& input = state_.inputs[i];
  const int source = input.get_device();
  const at::Tensor from = contiguous_on_device(input);
  const bool staged = !from.is_same(input);
  if (state_.target.is_cpu()) {
    const CudaStreamHandle stream = use(source);
    wait_for_inputs(source, source);
    at::Tensor result = host_tensor(input);
    DeviceGuard guard(source);
    copy_async(result.data_ptr(), from.data_ptr(), input.nbytes(), Direction::kDeviceToHost, stream);
    state_.results[i] = std::move(result);
  } else {
    const int target = state_.target.index();
    const CudaStreamHandle stream = use(target);
    if (staged) {
      // The temporary was written on the source's copy stream: the target's waits for that.
      std::shared_ptr<CudaEvent> written = CopyStreams::events(source)->acquire();
      written->record(CopyStreams::stream(source));
      written->wait_on(stream);
    } else {
      wait_for_inputs(target, source);
    }
    at::Tensor buffer;
    at::Tensor result = device_tensor(input, target, stream, buffer);
    state_.device_buffers.push_back(buffer);
    DeviceGuard guard(target);
    copy_peer_async(result.data_ptr(), target, from.data_ptr(), source, input.nbytes(), stream);
    state_.results[i] = std::move(result);
  }
  ++(staged ? state_.plan.staged : state_.plan.direct);
}

void CopySubmission::pack(const std::vector<size_t>& packed) {
  if (packed.empty()) return;
  focus_.reset();  // until a chunk is being handled
  focus_chunk_ = nullptr;
  std::vector<detail::PackItem> items;
  items.reserve(packed.size());
  for (size_t i : packed) {
    const at::Tensor& tensor = state_.inputs[i];
    items.push_back(detail::PackItem{tensor.nbytes(), static_cast<size_t>(tensor.element_size())});
  }
  const std::vector<detail::PackedChunk> chunks = detail::plan_packed_chunks(items, state_.options);
  const int target = state_.target.index();
  const CudaStreamHandle stream = use(target);
  std::vector<CopyOp> ops;
  chunk_members_.assign(chunks.size(), {});
  for (size_t c = 0; c < chunks.size(); ++c) {
    const detail::PackedChunk& chunk = chunks[c];
    std::vector<size_t>& members = chunk_members_[c];  // input positions, for focus_text()
    for (size_t m : chunk.members) members.push_back(packed[m]);
    focus_chunk(c, members);
    const size_t payload = chunk.payload_bytes;
    at::Tensor staging;
    if (payload != 0) {
      staging = state_.options.use_pinned_staging ? detail::allocate_pinned({static_cast<int64_t>(payload)}, at::kByte)
                                                  : at::empty({static_cast<int64_t>(payload)}, at::kByte);
      ops.clear();
      for (size_t m = 0; m < chunk.members.size(); ++m) {
        const at::Tensor& tensor = state_.inputs[packed[chunk.members[m]]];
        if (tensor.nbytes() == 0) continue;
        ops.push_back(CopyOp{bytes_of(staging) + chunk.offsets[m], bytes_of(tensor), tensor.nbytes(), {}, 1});
      }
      run_copies(ops, kParallelPackBytes);
      state_.keep_alive.push_back(staging);
    }
    at::Tensor buffer = detail::allocate_device_buffer(target, stream, payload);
    state_.device_buffers.push_back(buffer);
    if (payload != 0) {
      DeviceGuard guard(target);
      copy_async(buffer.data_ptr(), staging.data_ptr(), payload, Direction::kHostToDevice, stream);
    }
    for (size_t m = 0; m < chunk.members.size(); ++m) {
      const size_t i = packed[chunk.members[m]];
      const at::Tensor& tensor = state_.inputs[i];
      state_.results[i] =
          make_view(buffer.storage(), state_.target, tensor.scalar_type(), chunk.offsets[m], tensor.sizes());
    }
    state_.plan.packed += chunk.members.size();
    ++state_.plan.packed_chunks;
    state_.plan.chunk_payload_bytes.push_back(payload);
  }
}

void CopySubmission::focus_chunk(size_t c, const std::vector<size_t>& members) {
  focus_ = members.front();
  focus_chunk_ = &members;
  focus_chunk_index_ = c;
}

void CopySubmission::copy_to_device(size_t i) {
  const at::Tensor& input = state_.inputs[i];
  const int target = state_.target.index();
  const CudaStreamHandle stream = use(target);
  at::Tensor from = input;
  const bool pinned_staging = state_.options.use_pinned_staging;
  if (!plain_contiguous(input) || (pinned_staging && !input.is_pinned())) {
    from = host_tensor(input);
    if (plain_contiguous(input)) {
      run_copies({CopyOp{bytes_of(from), bytes_of(input), input.nbytes(), {}, 1}}, kParallelPackBytes);
    } else {
      c10::NoGradGuard no_grad;  // a copy of data, not a step of the caller's graph
      from.copy_(input);
    }
    state_.keep_alive.push_back(from);
  }
  at::Tensor buffer;
  at::Tensor result = device_tensor(input, target, stream, buffer);
  state_.device_buffers.push_back(buffer);
  DeviceGuard guard(target);
  copy_async(result.data_ptr(), from.data_ptr(), input.nbytes(), Direction::kHostToDevice, stream);
  state_.results[i] = std::move(result);
  // From pageable memory the runtime has staged the bytes before the call returns; from pinned
  // memory the copy engine reads the input itself, later.
  if (from.is_same(input) && input.is_pinned()) state_.reads_host_inputs_in_place = true;
  ++(from.is_same(input) ? state_.plan.direct : state_.plan.staged);
}

void submit(TensorCopyState& state) noexcept {
  if (state.abandoned.load(std::memory_order_acquire)) {
    state.finish(nullptr, std::nullopt);  // nobody will read the results: queue no copies
    return;
  }
  CopySubmission submission(state);
  std::exception_ptr failure;
  std::optional<size_t> tensor;
  try {
    submission.run();
  } catch (...) {
    failure = submission.placed(std::current_exception());
    tensor = submission.failed_tensor();
  }
  try {
    submission.protect();
  } catch (...) {
    if (!failure) failure = std::current_exception();
  }
  state.finish(std::move(failure), tensor);
}

}  // namespace ferry::detail
