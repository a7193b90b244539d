#include "ferry/pipeline/batch_group.h"

#include <string>

#include "ferry/pipeline/error.h"

namespace ferry {

const Batch& BatchGroup::operator[](size_t device) const {
  if (device >= batches_.size()) {
    throw Error("no batch for device " + std::to_string(device) + ": the step has " + std::to_string(batches_.size()) +
                " (one per device of the group)");
  }
  return batches_[device];
}

size_t BatchGroup::samples() const noexcept {
  size_t samples = 0;
  for (const Batch& batch : batches_) samples += batch.batch_size();
  return samples;
}

}  // namespace ferry
