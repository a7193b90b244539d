#include "ferry/copy/tensor_copy.h"

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ferry/build_config.h"
#include "ferry/copy/copy_streams.h"
#include "ferry/copy/copy_submission.h"
#include "ferry/copy/copy_worker.h"
#include "ferry/copy/retired_copies.h"
#include "ferry/copy/tensor_copy_state.h"
#include "ferry/pipeline/cuda_device.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/cuda_event.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/torch_cuda.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {

namespace {

using detail::CopyStreams;
using detail::submit;
using detail::tensor_text;
using detail::TensorCopyState;

int current_cuda_device() {
  int device = 0;
#if FERRY_HAVE_CUDART
  FERRY_CUDA_CHECK(cudaGetDevice(&device));
#endif
  return device;
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
  detail::RetiredCopies::sweep();  // frees the staging of earlier copies that have finished
  if (!device.is_cpu() && !device.is_cuda()) {
    throw Error(ErrorContext{"copy"}, "cannot copy to " + device.str() + ": only cpu and cuda targets are supported");
  }
  // A CUDA target that cannot work fails here, where the caller asked for it, not later in wait().
  at::Device target(at::kCPU);
  if (device.is_cuda()) {
    const auto refuse = [&](const std::string& why) {
      throw Error(ErrorContext{"copy"}, "cannot copy to " + device.str() + ": " + why);
    };
    if (!gpu_build()) refuse("this ferry build has no GPU support (" FERRY_BUILD_KIND " build: " FERRY_BUILD_REASON ")");
    if (cuda_device_count() == 0) refuse(cuda_unavailable_reason());
    if (device.has_index() && device.index() >= cuda_device_count()) {
      refuse("this process sees " + std::to_string(cuda_device_count()) + " CUDA device(s)");
    }
    target = device.has_index() ? device : at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(current_cuda_device()));
  }
  std::optional<size_t> failing;
  auto state = std::make_shared<TensorCopyState>(std::move(tensors), target, options);
  std::unique_ptr<TensorCopy> copy(new TensorCopy(state));
  try {
    record_inputs_ready(*state, failing);
  } catch (...) {
    const std::string what = failing ? tensor_text(*state, *failing) : std::string("the copy");
    state->finish(std::make_exception_ptr(Error(
                      ErrorContext{"copy"}, what + " to " + target.str() + ": " + cause_of(std::current_exception()))),
                  failing);
    return copy;
  }
  if (options.use_background_thread) {
    try {
      detail::CopyWorker::post(
          [state] {
            if (state->claim()) submit(*state);
          },
          [state](std::exception_ptr error) { state->finish(std::move(error), std::nullopt); });
      return copy;
    } catch (...) {
      // Not queued (no memory, or the thread could not start): submit here instead.
    }
  }
  if (state->claim()) submit(*state);
  return copy;
}

// Note [a waiter submits an unstarted copy]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With use_background_thread, start() hands the submission to the copy thread and returns. A caller
// that asks for the results (wait(), plan()) before that thread has even woken up would only sleep
// until it has: tens of microseconds of wake-up on the critical path of a training step that calls
// get() right after start_copy(). So the waiter claims the submission and runs it itself; the copy
// thread, when it comes to the job, finds it claimed and skips it. A submission already running is
// waited for as before (Note [spinning for a submission]). Submissions of different copies never
// depended on their order: each has its own staging, results and events.
void TensorCopy::help_submit() const {
  if (state_->claim()) detail::submit(*state_);
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
    state.store_error(
        std::make_exception_ptr(Error(ErrorContext{"copy"}, "the copies to " + state.target.str() +
                                                                " failed: " + cause_of(std::current_exception()))));
    return true;
  }
  state.completed.store(true, std::memory_order_release);
  return true;
}

const std::vector<at::Tensor>& TensorCopy::wait() {
  TensorCopyState& state = *state_;
  help_submit();
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
  if (state.target.is_cuda()) state.handed_out.store(true, std::memory_order_release);
  const bool host_waits = state.target.is_cpu() || state.reads_host_inputs_in_place;
  if (host_waits && !state.completed.load(std::memory_order_acquire)) {
    // CPU results are read by the host, and pinned inputs read in place may be reused by it once
    // this returns: the host waits for the copies themselves.
    try {
      for (const auto& done : state.copies_done) done->synchronize();
    } catch (...) {
      state.store_error(
          std::make_exception_ptr(Error(ErrorContext{"copy"}, "the copies to " + state.target.str() +
                                                                  " failed: " + cause_of(std::current_exception()))));
      std::rethrow_exception(state.stored_error());
    }
    state.completed.store(true, std::memory_order_release);
  }
  return state.results;
}

const CopyPlanStats& TensorCopy::plan() const {
  help_submit();
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

bool TensorCopy::destruction_blocks() const noexcept {
  const detail::TensorCopyState& state = *state_;
  if (!state.submitted_flag.load(std::memory_order_acquire)) return true;
  return !state.handed_out.load(std::memory_order_acquire) && !state.completed.load(std::memory_order_acquire);
}

TensorCopy::~TensorCopy() {
  if (!state_) return;
  state_->abandoned.store(true, std::memory_order_release);
  try {
    state_->wait_submitted();
    if (state_->handed_out.load(std::memory_order_acquire) && !state_->completed.load(std::memory_order_acquire)) {
      // Note [retiring a copy]: the memory the copies still read waits for them in RetiredCopies.
      std::vector<at::Tensor> still_read = std::move(state_->keep_alive);
      for (const at::Tensor& input : state_->inputs) {
        if (input.is_cuda()) still_read.push_back(input);
      }
      detail::RetiredCopies::retire(state_->copies_done, std::move(still_read));
    } else if (!state_->completed.load(std::memory_order_acquire)) {
      for (const auto& done : state_->copies_done) {
        try {
          done->synchronize();
        } catch (...) {
          // A failed copy has stopped reading its buffers; the error was or will not be reported.
        }
      }
    }
    state_->release();  // here, not on the copy thread, which may still hold the state
    detail::RetiredCopies::sweep();
  } catch (...) {
    // wait_submitted() throws only if the mutex does (system error), retire() and sweep() only
    // when out of memory: nothing better to do.
  }
}

}  // namespace ferry
