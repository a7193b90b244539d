#include "copy/tensor_copy.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include "copy/copy_streams.h"
#include "copy/copy_worker.h"
#include "copy/packed_chunks.h"
#include "ferry/build_config.h"
#include "pipeline/cuda_device.h"
#include "pipeline/cuda_error.h"
#include "pipeline/cuda_event.h"
#include "pipeline/device_guard.h"
#include "pipeline/error.h"
#include "pipeline/tensor_views.h"
#include "pipeline/torch_cuda.h"
#include "stages/parallel_copy.h"

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

namespace ferry {

namespace detail {

/// What a TensorCopy and its submission share. The inputs, target and options are fixed at start;
/// the submission alone writes the results and the keep-alive lists, before it publishes
/// `submitted` under `mutex`, and nobody writes them afterwards.
struct TensorCopyState {
  TensorCopyState(std::vector<at::Tensor> tensors, at::Device device, const CopyOptions& copy_options)
      : inputs(std::move(tensors)), target(device), options(copy_options) {}

  std::vector<at::Tensor> inputs;  // fixed at start; emptied by release()
  const at::Device target;
  const CopyOptions options;
  /// Per CUDA device that inputs live on: recorded on the caller's current stream at start.
  std::map<int, std::shared_ptr<CudaEvent>> inputs_ready;

  // Written by the submission only.
  std::vector<at::Tensor> results;
  std::vector<at::Tensor> keep_alive;      // staging buffers and temporaries that copies read
  std::vector<at::Tensor> device_buffers;  // the target-device allocations the results view
  std::vector<std::shared_ptr<CudaEvent>> copies_done;  // one per copy stream used, after its last copy
  CopyPlanStats plan;
  // A pinned input is copied from in place: it is read after submission, so wait() must see
  // the copies done before the caller may reuse it.
  bool reads_host_inputs_in_place = false;

  std::atomic<bool> abandoned{false};  // the handle is gone: a submission not yet begun is skipped
  std::atomic<bool> submitted_flag{false};
  std::atomic<bool> completed{false};  // every event in copies_done has completed (cached)

  mutable std::mutex mutex;
  mutable std::condition_variable submitted_cv;
  bool submitted = false;               // guarded by mutex
  std::exception_ptr error;             // guarded by mutex
  std::optional<size_t> failed_tensor;  // guarded by mutex

  void finish(std::exception_ptr failure, std::optional<size_t> tensor) noexcept {
    {
      std::lock_guard lock(mutex);
      if (!error) {
        error = std::move(failure);
        failed_tensor = tensor;
      }
      submitted = true;
      submitted_flag.store(true, std::memory_order_release);
    }
    submitted_cv.notify_all();
  }

  void wait_submitted() const {
    if (submitted_flag.load(std::memory_order_acquire)) return;
    std::unique_lock lock(mutex);
    submitted_cv.wait(lock, [this] { return submitted; });
  }

  std::exception_ptr stored_error() const {
    std::lock_guard lock(mutex);
    return error;
  }

  /// Drops every tensor: on the handle's thread, once nothing reads them any more, so that the last
  /// reference to an input (which may own Python memory, e.g. a numpy array's) never goes on the
  /// copy thread. The submission touches none of them after finish().
  void release() noexcept {
    inputs.clear();
    results.clear();
    keep_alive.clear();
    device_buffers.clear();
  }

  /// Keeps the first error: later ones are usually its consequences.
  void store_error(std::exception_ptr failure) {
    std::lock_guard lock(mutex);
    if (!error) error = std::move(failure);
  }
};

}  // namespace detail

namespace {

using detail::CopyStreams;
using detail::TensorCopyState;

// A staging copy at least this large is split over oneTBB's threads (the pipeline's default).
constexpr size_t kParallelPackBytes = size_t{1} << 20;

std::string cause_of(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    return e.cause();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Contiguous bytes that mean the tensor's values as they are (no lazy conjugate or negation bit).
bool plain_contiguous(const at::Tensor& tensor) {
  return tensor.is_contiguous() && !tensor.is_conj() && !tensor.is_neg();
}

std::byte* bytes_of(const at::Tensor& tensor) { return static_cast<std::byte*>(tensor.data_ptr()); }

enum class Direction { kHostToDevice, kDeviceToHost };

void copy_async(void* target, const void* source, size_t bytes, Direction direction, CudaStreamHandle stream) {
  if (bytes == 0) return;
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(cudaMemcpyAsync(target, source, bytes,
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

// "tensor 3 of 10 (Float [2] on cpu)": how a failure names the tensor it concerns.
std::string tensor_text(const TensorCopyState& state, size_t i) {
  return "tensor " + std::to_string(i) + " of " + std::to_string(state.inputs.size()) + " (" +
         describe_tensor(state.inputs[i]) + ")";
}

int current_cuda_device() {
  int device = 0;
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(cudaGetDevice(&device));
#endif
  return device;
}

/// One submission: classifies the inputs, stages, allocates and queues the copies (Note [how
/// TensorCopy moves a tensor]). Runs on one thread (the copy thread, or start()'s caller).
class Submission {
 public:
  explicit Submission(TensorCopyState& state) : state_(state) {}

  /// Throws on the first failure; failure() then says which tensor it concerned.
  void run() {
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

  /// Records the completion event of every copy stream that has copies queued, also after a
  /// failure (Note [streams of a TensorCopy]). Where an event cannot be recorded, waits for the
  /// stream instead and throws.
  void protect() {
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

  /// The failure, placed: a ferry::Error naming the tensor (or chunk) being handled and the cause.
  std::exception_ptr placed(const std::exception_ptr& failure) const noexcept {
    try {
      return std::make_exception_ptr(
          Error(ErrorContext{"copy"}, focus_text() + " to " + state_.target.str() + ": " + cause_of(failure)));
    } catch (...) {
      return failure;  // out of memory while describing it: the original says something still
    }
  }

  std::optional<size_t> failed_tensor() const { return focus_; }

 private:
  bool packable(const at::Tensor& tensor) const {
    const size_t bytes = tensor.nbytes();
    return state_.options.pack_cpu_tensors && plain_contiguous(tensor) && bytes <= kMaxPackedTensorBytes &&
           bytes <= state_.options.max_packed_chunk_bytes;
  }

  // What is being handled, for placing a failure: a tensor, or a packed chunk (its members). Only
  // indices are noted here; the text is made if a failure needs it (this runs once per tensor).
  void focus(size_t i) {
    focus_ = i;
    focus_chunk_ = nullptr;
  }

  std::string focus_text() const {
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

  // The copy stream of `device`, noted as having copies queued (before the first is queued).
  CudaStreamHandle use(int device) {
    if (std::find(used_.begin(), used_.end(), device) == used_.end()) used_.push_back(device);
    return CopyStreams::stream(device);
  }

  // Makes `device`'s copy stream wait until the caller's work on `source`'s inputs is done.
  void wait_for_inputs(int device, int source) {
    if (!waited_.insert({device, source}).second) return;
    state_.inputs_ready.at(source)->wait_on(CopyStreams::stream(device));
  }

  // A tensor of `like`'s shape and dtype viewing a new buffer on `device`, allocated for `stream`.
  static at::Tensor device_tensor(const at::Tensor& like, int device, CudaStreamHandle stream, at::Tensor& buffer) {
    buffer = detail::allocate_device_buffer(device, stream, like.nbytes());
    return make_view(buffer.storage(), at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)),
                     like.scalar_type(), 0, like.sizes());
  }

  // A CPU tensor of `like`'s shape and dtype: pinned with use_pinned_staging, else pageable.
  at::Tensor host_tensor(const at::Tensor& like) const {
    if (state_.options.use_pinned_staging) return detail::allocate_pinned(like.sizes(), like.scalar_type());
    return at::empty(like.sizes(), at::TensorOptions().dtype(like.scalar_type()));
  }

  // The input itself when plain contiguous, else a contiguous copy made on its own device's copy
  // stream (which first waits for the caller's work on it).
  at::Tensor contiguous_on_device(const at::Tensor& input) {
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

  void copy_from_device(size_t i) {
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

  void pack(const std::vector<size_t>& packed) {
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
        state_.results[i] = make_view(buffer.storage(), state_.target, tensor.scalar_type(), chunk.offsets[m],
                                      tensor.sizes());
      }
      state_.plan.packed += chunk.members.size();
      ++state_.plan.packed_chunks;
      state_.plan.chunk_payload_bytes.push_back(payload);
    }
  }

  void focus_chunk(size_t c, const std::vector<size_t>& members) {
    focus_ = members.front();
    focus_chunk_ = &members;
    focus_chunk_index_ = c;
  }

  void copy_to_device(size_t i) {
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

  TensorCopyState& state_;
  std::vector<int> used_;                  // devices whose copy stream has copies queued
  std::set<std::pair<int, int>> waited_;   // (copy stream's device, source device) waits queued
  std::optional<size_t> focus_;                         // the tensor being handled (first of a chunk)
  const std::vector<size_t>* focus_chunk_ = nullptr;    // the chunk's input positions, when packing
  size_t focus_chunk_index_ = 0;
  std::vector<std::vector<size_t>> chunk_members_;       // per chunk: its input positions
};

// Runs the submission of `state` and publishes its outcome. Never throws.
void submit(TensorCopyState& state) noexcept {
  if (state.abandoned.load(std::memory_order_acquire)) {
    state.finish(nullptr, std::nullopt);  // nobody will read the results: queue no copies
    return;
  }
  Submission submission(state);
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

// Makes the copy streams able to wait for the caller's work on each CUDA source device: an event
// on the caller's current stream there (Note [how TensorCopy moves a tensor]). On start()'s thread,
// since "current stream" is per thread.
void record_inputs_ready(TensorCopyState& state, std::optional<size_t>& failing) {
  for (size_t i = 0; i < state.inputs.size(); ++i) {
    const at::Tensor& tensor = state.inputs[i];
    if (!tensor.defined() || !tensor.is_cuda() || tensor.device() == state.target) continue;
    const int device = tensor.get_device();
    if (state.inputs_ready.count(device) != 0) continue;
    failing = i;
    DeviceGuard guard(device);
    std::shared_ptr<CudaEvent> ready = CopyStreams::events(device)->acquire();
    ready->record(detail::current_torch_stream(device));
    state.inputs_ready.emplace(device, std::move(ready));
  }
  failing.reset();
}

}  // namespace

TensorCopy::TensorCopy(std::shared_ptr<detail::TensorCopyState> state) : state_(std::move(state)) {}

std::unique_ptr<TensorCopy> TensorCopy::start(std::vector<at::Tensor> tensors, at::Device device,
                                              const CopyOptions& options) {
  validate(options);
  if (!device.is_cpu() && !device.is_cuda()) {
    throw Error(ErrorContext{"copy"}, "cannot copy to " + device.str() + ": only cpu and cuda targets are supported");
  }
  // Why a CUDA target cannot work here; stored, so that wait() reports it like any copy failure.
  std::string unavailable;
  at::Device target(at::kCPU);
  if (device.is_cuda()) {
    target = device;
    if (!gpu_build()) {
      unavailable = "this ferry build has no GPU support (" FERRY_BUILD_KIND " build: " FERRY_BUILD_REASON ")";
    } else if (cuda_device_count() == 0) {
      unavailable = cuda_unavailable_reason();
    } else if (device.has_index() && device.index() >= cuda_device_count()) {
      throw Error(ErrorContext{"copy"}, "cannot copy to " + device.str() + ": this process sees " +
                                            std::to_string(cuda_device_count()) + " CUDA device(s)");
    }
  }

  std::optional<size_t> failing;
  if (unavailable.empty() && device.is_cuda() && !device.has_index()) {
    try {
      target = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(current_cuda_device()));
    } catch (...) {
      unavailable = cause_of(std::current_exception());
    }
  }
  auto state = std::make_shared<TensorCopyState>(std::move(tensors), target, options);
  std::unique_ptr<TensorCopy> copy(new TensorCopy(state));
  if (!unavailable.empty()) {
    state->finish(std::make_exception_ptr(Error(ErrorContext{"copy"}, "cannot copy to " + device.str() + ": " + unavailable)),
                  std::nullopt);
    return copy;
  }
  try {
    record_inputs_ready(*state, failing);
  } catch (...) {
    const std::string what = failing ? tensor_text(*state, *failing) : std::string("the copy");
    state->finish(std::make_exception_ptr(Error(ErrorContext{"copy"}, what + " to " + target.str() + ": " +
                                                                          cause_of(std::current_exception()))),
                  failing);
    return copy;
  }
  if (options.use_background_thread) {
    try {
      detail::CopyWorker::post([state] { submit(*state); },
                               [state](std::exception_ptr error) { state->finish(std::move(error), std::nullopt); });
      return copy;
    } catch (...) {
      // Not queued (no memory, or the thread could not start): submit here instead.
    }
  }
  submit(*state);
  return copy;
}

bool TensorCopy::ready() const {
  TensorCopyState& state = *state_;
  if (!state.submitted_flag.load(std::memory_order_acquire)) return false;
  if (state.completed.load(std::memory_order_acquire) || state.stored_error()) return true;
  try {
    for (const auto& done : state.copies_done) {
      if (!done->query()) return false;
    }
  } catch (...) {
    state.store_error(std::make_exception_ptr(Error(
        ErrorContext{"copy"}, "the copies to " + state.target.str() + " failed: " + cause_of(std::current_exception()))));
    return true;
  }
  state.completed.store(true, std::memory_order_release);
  return true;
}

const std::vector<at::Tensor>& TensorCopy::wait() {
  TensorCopyState& state = *state_;
  state.wait_submitted();
  if (std::exception_ptr failure = state.stored_error()) std::rethrow_exception(failure);
  if (state.target.is_cuda() && !(state.copies_done.empty() && state.device_buffers.empty())) {
    // Note [streams of a TensorCopy]: the caller's stream waits on the device, not the host. So do
    // the caller's streams of the source devices: their next kernels may overwrite the inputs.
    const int device = state.target.index();
    try {
      DeviceGuard guard(device);
      const CudaStreamHandle consumer = detail::current_torch_stream(device);
      for (const auto& done : state.copies_done) done->wait_on(consumer);
      for (const at::Tensor& buffer : state.device_buffers) detail::record_stream(buffer, consumer);
      for (const auto& source : state.inputs_ready) {
        DeviceGuard on_source(source.first);
        const CudaStreamHandle producer = detail::current_torch_stream(source.first);
        for (const auto& done : state.copies_done) done->wait_on(producer);
      }
    } catch (...) {
      throw Error(ErrorContext{"copy"}, "cannot hand the results on " + state.target.str() +
                                            " to the current stream: " + cause_of(std::current_exception()));
    }
  }
  const bool host_waits = state.target.is_cpu() || state.reads_host_inputs_in_place;
  if (host_waits && !state.completed.load(std::memory_order_acquire)) {
    // CPU results are read by the host, and pinned inputs read in place may be reused by it once
    // this returns: the host waits for the copies themselves.
    try {
      for (const auto& done : state.copies_done) done->synchronize();
    } catch (...) {
      state.store_error(std::make_exception_ptr(Error(
          ErrorContext{"copy"}, "the copies to " + state.target.str() + " failed: " + cause_of(std::current_exception()))));
      std::rethrow_exception(state.stored_error());
    }
    state.completed.store(true, std::memory_order_release);
  }
  return state.results;
}

const CopyPlanStats& TensorCopy::plan() const {
  state_->wait_submitted();
  return state_->plan;
}

std::optional<size_t> TensorCopy::failed_tensor() const {
  state_->wait_submitted();
  std::lock_guard lock(state_->mutex);
  return state_->failed_tensor;
}

std::string describe_tensor(const at::Tensor& tensor) {
  if (!tensor.defined()) return "undefined";
  std::string text = c10::toString(tensor.scalar_type());
  text += " [";
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    if (d != 0) text += ", ";
    text += std::to_string(tensor.size(d));
  }
  return text + "] on " + tensor.device().str();
}

at::Device TensorCopy::device() const { return state_->target; }

TensorCopy::~TensorCopy() {
  if (!state_) return;
  state_->abandoned.store(true, std::memory_order_release);
  try {
    state_->wait_submitted();
    if (!state_->completed.load(std::memory_order_acquire)) {
      for (const auto& done : state_->copies_done) {
        try {
          done->synchronize();
        } catch (...) {
          // A failed copy has stopped reading its buffers; the error was or will not be reported.
        }
      }
    }
    state_->release();  // here, not on the copy thread, which may still hold the state
  } catch (...) {
    // wait_submitted() throws only if the mutex does (system error): nothing better to do.
  }
}

}  // namespace ferry
