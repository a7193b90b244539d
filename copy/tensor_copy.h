#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "ferry/copy/copy_options.h"

namespace ferry {

namespace detail {
struct TensorCopyState;  // tensor_copy_state.h: what the handle and its submission share
}

/// Copies a flat list of tensors to one device, asynchronously: the flat core under start_copy()
/// (and the Python binding). In: tensors on any mix of cpu and cuda devices. Out, from wait(): the
/// tensors on `device`, in input order, with the input's shapes, dtypes and values (contiguous;
/// strides need not match the input's). Note [how TensorCopy moves a tensor] in copy_submission.cpp
/// says which route each tensor takes; plan() says which one it took.
///
/// Threads: start() runs on the caller's thread and records, on the current torch stream of every
/// CUDA device that inputs live on, the point after which those inputs may be read. Staging,
/// allocation and copy submission then run on ferry's copy thread (CopyWorker), or inside start()
/// without use_background_thread. The copies run on ferry's own copy stream of each device
/// (CopyStreams). ready() and wait() may be called from any thread, also concurrently.
///
/// Owns the inputs, every staging buffer and the results until the copies have completed: the
/// caller must neither free nor modify an input in place before wait() returned or ready() is true.
/// Destroying a TensorCopy before wait() waits for its submission and its copies; after it, the
/// host does not wait (Note [retiring a copy] in retired_copies.h).
class TensorCopy {
 public:
  /// Starts copying every tensor of `tensors` to `device`. Invalid options or device throw
  /// ferry::Error here; everything else (CUDA errors, a build without GPU support) is stored and
  /// rethrown by wait(). Does not block on copies; allocates. Thread-safe.
  static std::unique_ptr<TensorCopy> start(std::vector<at::Tensor> tensors, at::Device device,
                                           const CopyOptions& options);

  /// Never blocks: true once the submission has finished (or failed) and every copy has completed.
  /// Thread-safe.
  bool ready() const;

  /// Blocks until the submission has finished; rethrows its error (on every call: a ferry::Error
  /// naming the tensor's position in the input and the cause). The results are then safe to use
  /// on the calling thread's current CUDA stream of the target device: that stream waits for the
  /// copies on the device (the host does not), and libtorch's allocator learns that it uses the
  /// results' memory. For a cpu target it blocks until the copies have completed. Callable
  /// repeatedly, from any thread: each call makes its own current stream safe.
  const std::vector<at::Tensor>& wait();

  /// How each tensor was handled. Blocks until the submission has finished; complete only if it
  /// succeeded (call it after wait()).
  const CopyPlanStats& plan() const;

  /// The input position of the tensor whose copy failed, if one did and the failure concerns one
  /// tensor (or the first of a packed chunk). Blocks until the submission has finished.
  std::optional<size_t> failed_tensor() const;

  /// The target device, with its index resolved ("cuda" is the caller's current device at start).
  at::Device device() const;

  /// Whether the destructor may block: the submission has not finished, or the results were never
  /// handed out and the copies have not been seen to complete. Never blocks. (The Python binding
  /// keeps the GIL over a destruction that cannot block: python_copy.cpp says why.)
  bool destruction_blocks() const noexcept;

  /// Waits for the submission; a submission still queued is skipped. Then, if wait() handed CUDA
  /// results out, the memory the copies still read goes to RetiredCopies and the host does not wait
  /// (Note [retiring a copy]); otherwise it waits for the copies (staging buffers must not be freed
  /// under a running copy). Never throws.
  ~TensorCopy();

  TensorCopy(const TensorCopy&) = delete;
  TensorCopy& operator=(const TensorCopy&) = delete;

 private:
  explicit TensorCopy(std::shared_ptr<detail::TensorCopyState> state);
  /// Runs the submission here if the copy thread has not begun it (Note [a waiter submits an
  /// unstarted copy] in the .cpp).
  void help_submit() const;
  std::shared_ptr<detail::TensorCopyState> state_;
};

/// "Float [2, 3] on cuda:0": how errors name a tensor. Allocates; thread-safe.
std::string describe_tensor(const at::Tensor& tensor);

}  // namespace ferry
