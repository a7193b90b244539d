#pragma once

#include "ferry/io/samplers/sampler.h"

namespace ferry {

/// Visits 0, 1, ..., size - 1 in every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(uint64_t size) : size_(size) {}
  uint64_t epoch_size() const override { return size_; }
  bool same_order_every_epoch() const override { return true; }
  /// Throws ferry::Error for a position outside the epoch.
  uint64_t index(uint64_t epoch, uint64_t position) const override;
  std::string describe() const override;

 private:
  uint64_t size_;
};

}  // namespace ferry
