#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "ferry/copy/copy_options.h"
#include "ferry/pipeline/cuda_event.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ferry::detail {

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
  std::vector<at::Tensor> keep_alive;                   // staging buffers and temporaries that copies read
  std::vector<at::Tensor> device_buffers;               // the target-device allocations the results view
  std::vector<std::shared_ptr<CudaEvent>> copies_done;  // one per copy stream used, after its last copy
  CopyPlanStats plan;
  // A pinned input is copied from in place: it is read after submission, so wait() must see
  // the copies done before the caller may reuse it.
  bool reads_host_inputs_in_place = false;

  std::atomic<bool> abandoned{false};  // the handle is gone: a submission not yet begun is skipped
  /// Note [a waiter submits an unstarted copy]: whoever claims the submission first runs it, the copy
  /// thread or a thread that waits for the copy before that thread has come to it.
  std::atomic<bool> claimed{false};
  std::atomic<bool> submitted_flag{false};
  std::atomic<bool> completed{false};
  /// wait() has handed the results of a CUDA target out: the handle's destruction retires what the
  /// copies still read instead of waiting for them (Note [retiring a copy] in retired_copies.h).
  std::atomic<bool> handed_out{false};  // every event in copies_done has completed (cached)

  mutable std::mutex mutex;
  mutable std::condition_variable submitted_cv;
  bool submitted = false;               // guarded by mutex
  std::exception_ptr error;             // guarded by mutex
  std::optional<size_t> failed_tensor;  // guarded by mutex

  /// True for the one caller that gets to run the submission.
  bool claim() noexcept { return !claimed.exchange(true, std::memory_order_acq_rel); }

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

  // Note [spinning for a submission]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // get() usually comes right after start_copy(), while the copy thread is still packing and
  // submitting (tens to hundreds of microseconds for a training step's inputs). Blocking on the
  // condition variable then costs a futex sleep and a wake-up of this thread, tens of microseconds
  // on a loaded machine, on top of the submission. So the waiter first spins on the flag, pausing
  // between reads, for up to kSpinFor, and only then sleeps: a submission that takes longer costs
  // that much of one core, once.
  static constexpr std::chrono::microseconds kSpinFor{200};

  void wait_submitted() const {
    if (submitted_flag.load(std::memory_order_acquire)) return;
    const auto until = std::chrono::steady_clock::now() + kSpinFor;
    do {
      for (int i = 0; i < 32; ++i) {
#if defined(__x86_64__) || defined(__i386__)
        _mm_pause();
#endif
      }
      if (submitted_flag.load(std::memory_order_acquire)) return;
    } while (std::chrono::steady_clock::now() < until);
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

}  // namespace ferry::detail
