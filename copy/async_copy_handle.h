#pragma once

#include <memory>
#include <optional>

#include <c10/core/Device.h>

#include "ferry/copy/copy_options.h"
#include "ferry/copy/nested.h"
#include "ferry/copy/tensor_copy.h"

namespace ferry {

/// A copy of a nested structure under way (start_copy()). In: the structure. Out, from get(): the
/// same structure (container kinds, dict order, None and opaque leaves as they were) with every
/// tensor replaced by its copy on the target device. Owns a TensorCopy of the flattened tensors
/// (Nested::tensors() order), so what TensorCopy says about threads, streams and lifetimes holds:
/// destroying the handle before get() waits for the copies.
///
/// Movable, not copyable. get() and ready() may be called from any thread, but the handle itself
/// is not to be moved or destroyed while another thread uses it.
class AsyncCopyHandle {
 public:
  AsyncCopyHandle(Nested structure, std::unique_ptr<TensorCopy> copy);
  AsyncCopyHandle(AsyncCopyHandle&&) noexcept = default;
  AsyncCopyHandle& operator=(AsyncCopyHandle&&) noexcept = default;
  ~AsyncCopyHandle() = default;

  /// Never blocks: true once every copy has completed (or the copy failed; get() then throws).
  bool ready() const;

  /// Blocks until the copies are submitted and returns the copied structure, safe on the calling
  /// thread's current CUDA stream (TensorCopy::wait()). Rethrows the copy's error on every call: a
  /// ferry::Error that names the failing tensor's place in the structure ("data['x'][0]") and the
  /// cause. Allocates the structure on the first successful call only.
  Nested get();

  /// How each tensor was handled (TensorCopy::plan()). Blocks until the submission has finished.
  const CopyPlanStats& plan() const;

  at::Device device() const;

 private:
  const TensorCopy& copy() const;

  Nested structure_;  // the input, for its shape; its tensors stay alive with the TensorCopy's
  std::unique_ptr<TensorCopy> copy_;
  std::optional<Nested> result_;
};

/// Starts copying every tensor of `data` to `device` (Note [how TensorCopy moves a tensor] in
/// copy_submission.cpp). Invalid options or device throw ferry::Error here; every other failure comes
/// from get(). Does not block on copies; thread-safe. The caller must neither free nor modify an
/// input in place until the copy has completed (get() returned, or ready() is true).
AsyncCopyHandle start_copy(Nested data, at::Device device, const CopyOptions& options = {});

}  // namespace ferry
