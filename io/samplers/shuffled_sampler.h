#pragma once

#include <cstdint>
#include <string>

#include "ferry/io/samplers/sampler.h"

namespace ferry {

/// Visits a different permutation of 0, ..., size - 1 in every epoch; the permutation depends only on
/// (seed, epoch). In: the source's size and a seed. Out: index(epoch, position), computed on demand
/// (see Note [shuffle by Feistel permutation]); nothing is stored per epoch. Immutable after
/// construction, so any thread may call it, from as many threads at once as it likes.
class ShuffledSampler : public Sampler {
 public:
  /// Any size, 0 through 2^64 - 1. Does not allocate.
  ShuffledSampler(uint64_t size, uint64_t seed);

  uint64_t epoch_size() const override { return size_; }
  /// O(1) expected time (fewer than 2 walks of the permutation on average), no allocation, no
  /// lock. Throws ferry::Error for position >= size.
  uint64_t index(uint64_t epoch, uint64_t position) const override;
  /// "shuffled(size=N, seed=S)".
  std::string describe() const override;

 private:
  uint64_t size_;
  uint64_t seed_;
  unsigned left_bits_;   // the high half of the domain's bits (the larger one when their count is odd)
  unsigned right_bits_;  // the low half
};

}  // namespace ferry
