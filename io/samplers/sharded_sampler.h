#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ferry/io/samplers/sampler.h"

namespace ferry {

/// One data-parallel rank's share of another sampler's epochs. In: the inner sampler (shared by all
/// ranks, e.g. a ShuffledSampler with the same seed everywhere), this rank and the world size. Out:
/// rank r visits the inner epoch's global positions r, r + W, r + 2W, ... Every rank has the same
/// epoch_size(), so ranks never disagree on how many batches an epoch has (a rank that ran out early
/// would hang the others in their next collective):
///
///   kPad:  ceil(n / W) positions per rank; global positions g >= n wrap to inner position g % n,
///          i.e. repeat the epoch's first samples (as torch's DistributedSampler does).
///   kDrop: floor(n / W) positions per rank; the last n % W samples of each epoch are skipped.
///
/// Immutable after construction; any thread may call it, as the inner sampler allows (Sampler's
/// contract makes that every thread).
class ShardedSampler : public Sampler {
 public:
  enum class Remainder { kPad, kDrop };

  /// Throws ferry::Error for a null inner sampler, world_size 0 or rank >= world_size.
  ShardedSampler(std::shared_ptr<const Sampler> inner, uint64_t rank, uint64_t world_size, Remainder remainder);

  uint64_t epoch_size() const override { return epoch_size_; }
  bool same_order_every_epoch() const override { return inner_->same_order_every_epoch(); }
  /// With one rank, the inner sampler's set; with several, a rank's share is the same only when the
  /// inner order is (a shuffle deals each rank other samples every epoch).
  bool same_samples_every_epoch() const override {
    return world_size_ == 1 ? inner_->same_samples_every_epoch() : inner_->same_order_every_epoch();
  }
  /// O(1) plus one inner index(); no allocation. Throws ferry::Error for position >= epoch_size().
  uint64_t index(uint64_t epoch, uint64_t position) const override;
  /// e.g. "sharded(rank=1/4, pad, shuffled(size=10, seed=3))".
  std::string describe() const override;

  uint64_t rank() const noexcept { return rank_; }
  uint64_t world_size() const noexcept { return world_size_; }
  Remainder remainder() const noexcept { return remainder_; }

 private:
  std::shared_ptr<const Sampler> inner_;
  uint64_t rank_;
  uint64_t world_size_;
  Remainder remainder_;
  uint64_t inner_size_;  // the inner sampler's epoch_size(), which a Sampler never changes
  uint64_t epoch_size_;
};

}  // namespace ferry
