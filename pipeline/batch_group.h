#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/pipeline/batch.h"

namespace ferry {

/// One step of a PipelineGroup: a batch for each of its devices, in the group's device order. The
/// batches are of the same epoch and index; each holds its device's share of the step's samples, and is
/// ready on its device's current CUDA stream of the thread that took the step.
///
///   for (const ferry::BatchGroup& step : group) {
///     for (size_t d = 0; d < step.size(); ++d) train_on(d, step[d]["image"]);
///   }
///
/// Copyable (copies share the tensors).
class BatchGroup {
 public:
  BatchGroup() = default;
  explicit BatchGroup(std::vector<Batch> batches) : batches_(std::move(batches)) {}

  /// Devices (batches) in the step.
  size_t size() const noexcept { return batches_.size(); }
  /// The batch of the group's `device`-th device. Throws ferry::Error out of range.
  const Batch& operator[](size_t device) const;
  const std::vector<Batch>& batches() const noexcept { return batches_; }
  std::vector<Batch>::const_iterator begin() const noexcept { return batches_.begin(); }
  std::vector<Batch>::const_iterator end() const noexcept { return batches_.end(); }

  /// The step's place in the run, the same for every batch of it (0 for an empty group).
  uint64_t epoch() const noexcept { return batches_.empty() ? 0 : batches_.front().epoch(); }
  uint64_t index() const noexcept { return batches_.empty() ? 0 : batches_.front().index(); }
  uint64_t sequence() const noexcept { return batches_.empty() ? 0 : batches_.front().sequence(); }
  /// Samples over every device's batch.
  size_t samples() const noexcept;

 private:
  std::vector<Batch> batches_;
};

}  // namespace ferry
