#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/pipeline/batch_schema.h"
#include "ferry/pipeline/pipeline_state.h"

namespace ferry {

class CudaEvent;

/// Which batch this is: where it sits in the run and which samples it holds.
struct BatchInfo {
  uint64_t sequence = 0;  // position in this pipeline's run: 0, 1, 2, ... across epochs (a resumed
                          // pipeline counts from 0 again: add EngineOptions::first_batch)
  uint64_t epoch = 0;
  uint64_t index = 0;                    // position within its epoch
  std::vector<uint64_t> sample_indices;  // source indices, in batch order
  BatchCursor next;                      // where the batch after it starts (PipelineState::next once delivered)
};

/// One delivered batch: named tensors (at::Tensor is torch::Tensor) on the pipeline's device, plus
/// where it came from. All fields are views into one allocation (`buffer()`), made through
/// libtorch's allocator, so keeping any field alive keeps the memory alive.
///
/// A batch handed out by Pipeline::next() is ready on the consumer's current CUDA stream: that
/// stream already waits for the copy (`ready_event()`), and the allocator knows the stream uses the
/// memory. Copyable (copies share the tensors). Not thread-safe to mutate; reading from several
/// threads is fine.
class Batch {
 public:
  Batch() = default;
  /// `lists`: empty, or one entry per field, the samples' views of a list field (none for the others).
  Batch(std::shared_ptr<const BatchSchema> schema, std::vector<at::Tensor> tensors, BatchInfo info,
        at::Tensor buffer = {}, std::shared_ptr<CudaEvent> ready = {}, std::vector<std::vector<at::Tensor>> lists = {});

  /// The field called `name`. Throws ferry::Error naming the field and the fields there are.
  const at::Tensor& operator[](std::string_view name) const;
  const at::Tensor& at(std::string_view name) const { return (*this)[name]; }
  /// The field called `name`, or nullptr.
  const at::Tensor* find(std::string_view name) const;
  /// A field delivered as a list (collate.lists): each sample's tensor at its own shape, in batch order,
  /// views of the batch's buffer (the field itself is their elements back to back, 1-D). Throws
  /// ferry::Error for a field that is not a list, naming those that are.
  const std::vector<at::Tensor>& list(std::string_view name) const;
  bool is_list(std::string_view name) const;
  /// The list of the field at `position` in names(), or nullptr where that field is not a list.
  const std::vector<at::Tensor>* list_at(size_t position) const noexcept;
  bool contains(std::string_view name) const { return find(name) != nullptr; }

  size_t size() const noexcept { return tensors_.size(); }
  const std::vector<std::string>& names() const;
  const std::vector<at::Tensor>& tensors() const noexcept { return tensors_; }

  uint64_t sequence() const noexcept { return info_.sequence; }
  uint64_t epoch() const noexcept { return info_.epoch; }
  uint64_t index() const noexcept { return info_.index; }
  const std::vector<uint64_t>& sample_indices() const noexcept { return info_.sample_indices; }
  size_t batch_size() const noexcept { return info_.sample_indices.size(); }
  const BatchInfo& info() const noexcept { return info_; }

  /// The device all fields live on (CPU for an empty batch).
  at::Device device() const;
  /// Bytes of all fields together (without alignment padding between them).
  size_t nbytes() const;

  /// The single allocation the fields are views of (undefined if the batch was built otherwise).
  const at::Tensor& buffer() const noexcept { return buffer_; }
  /// The event recorded after the copy into buffer(); null for CPU batches.
  const std::shared_ptr<CudaEvent>& ready_event() const noexcept { return ready_; }
  /// Makes the current stream of the batch's device wait for the copy (on the device: the host does
  /// not block) and tells the allocator that stream uses the memory. Pipeline::next() does this on
  /// the stream that is current when it hands the batch out; call it again before using a batch that
  /// was kept on another stream or thread. Nothing for CPU batches. Throws ferry::CudaError.
  void ready_on_current_stream() const;

 private:
  std::shared_ptr<const BatchSchema> schema_;
  std::vector<at::Tensor> tensors_;
  std::vector<std::vector<at::Tensor>> lists_;  // empty, or per field (a list field's views)
  BatchInfo info_;
  at::Tensor buffer_;
  std::shared_ptr<CudaEvent> ready_;
};

}  // namespace ferry
