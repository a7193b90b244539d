#pragma once

#include <cstddef>
#include <exception>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/copy/tensor_copy_state.h"
#include "ferry/pipeline/cuda_types.h"

namespace ferry::detail {

/// One submission: classifies the inputs, stages, allocates and queues the copies (Note [how
/// TensorCopy moves a tensor]). Runs on one thread (the copy thread, or start()'s caller).
class CopySubmission {
 public:
  explicit CopySubmission(TensorCopyState& state) : state_(state) {}

  /// Throws on the first failure; failure() then says which tensor it concerned.
  void run();

  /// Records the completion event of every copy stream that has copies queued, also after a
  /// failure (Note [streams of a TensorCopy]). Where an event cannot be recorded, waits for the
  /// stream instead and throws.
  void protect();

  /// The failure, placed: a ferry::Error naming the tensor (or chunk) being handled and the cause.
  std::exception_ptr placed(const std::exception_ptr& failure) const noexcept;

  std::optional<size_t> failed_tensor() const { return focus_; }

 private:
  bool packable(const at::Tensor& tensor) const;

  // What is being handled, for placing a failure: a tensor, or a packed chunk (its members). Only
  // indices are noted here; the text is made if a failure needs it (this runs once per tensor).
  void focus(size_t i);

  std::string focus_text() const;

  // The copy stream of `device`, noted as having copies queued (before the first is queued).
  CudaStreamHandle use(int device);

  // Makes `device`'s copy stream wait until the caller's work on `source`'s inputs is done.
  void wait_for_inputs(int device, int source);

  // A tensor of `like`'s shape and dtype viewing a new buffer on `device`, allocated for `stream`.
  static at::Tensor device_tensor(const at::Tensor& like, int device, CudaStreamHandle stream, at::Tensor& buffer);

  // A CPU tensor of `like`'s shape and dtype: pinned with use_pinned_staging, else pageable.
  at::Tensor host_tensor(const at::Tensor& like) const;

  // The input itself when plain contiguous, else a contiguous copy made on its own device's copy
  // stream (which first waits for the caller's work on it).
  at::Tensor contiguous_on_device(const at::Tensor& input);

  void copy_from_device(size_t i);

  void pack(const std::vector<size_t>& packed);

  void focus_chunk(size_t c, const std::vector<size_t>& members);

  void copy_to_device(size_t i);

  TensorCopyState& state_;
  std::vector<int> used_;                             // devices whose copy stream has copies queued
  std::set<std::pair<int, int>> waited_;              // (copy stream's device, source device) waits queued
  std::optional<size_t> focus_;                       // the tensor being handled (first of a chunk)
  const std::vector<size_t>* focus_chunk_ = nullptr;  // the chunk's input positions, when packing
  size_t focus_chunk_index_ = 0;
  std::vector<std::vector<size_t>> chunk_members_;  // per chunk: its input positions
};

/// Runs the submission of `state` and publishes its outcome. Never throws.
void submit(TensorCopyState& state) noexcept;

/// "tensor 3 of 10 (Float [2] on cpu)": how a failure names the tensor it concerns.
std::string tensor_text(const TensorCopyState& state, size_t i);

}  // namespace ferry::detail
