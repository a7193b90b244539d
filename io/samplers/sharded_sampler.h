#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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
/// A run resumed on another number of ranks (Note [resuming on other ranks]) deals the rest of the
/// epoch it resumes in from where all the saved ranks together had got to: see Resume.
///
/// Immutable after construction; any thread may call it, as the inner sampler allows (Sampler's
/// contract makes that every thread).
class ShardedSampler : public Sampler {
 public:
  enum class Remainder { kPad, kDrop };
  /// In `epoch`, this rank's positions from `position` on take the inner epoch's global positions
  /// consumed + (p - position) x W + rank: the samples the ranks before had not taken yet, dealt to
  /// these ranks. Positions before `position` (only replacements of skipped samples read them) and
  /// other epochs are dealt as without it.
  struct Resume {
    uint64_t epoch = 0;
    uint64_t consumed = 0;  // < the inner epoch's size
    uint64_t position = 0;  // <= epoch_size()
  };

  /// Throws ferry::Error for a null inner sampler, world_size 0, rank >= world_size, or a resume
  /// point outside the epoch.
  ShardedSampler(std::shared_ptr<const Sampler> inner, uint64_t rank, uint64_t world_size, Remainder remainder,
                 std::optional<Resume> resume = std::nullopt);

  uint64_t epoch_size() const override { return epoch_size_; }
  bool same_order_every_epoch() const override { return !resume_ && inner_->same_order_every_epoch(); }
  /// With one rank, the inner sampler's set; with several, a rank's share is the same only when the
  /// inner order is (a shuffle deals each rank other samples every epoch).
  bool same_samples_every_epoch() const override {
    if (resume_) return false;  // the resumed epoch deals this rank other samples than the next ones
    return world_size_ == 1 ? inner_->same_samples_every_epoch() : inner_->same_order_every_epoch();
  }
  /// position x world_size (from Resume's point on in its epoch), at most the inner epoch's size.
  uint64_t consumed_before(uint64_t epoch, uint64_t position) const override;
  /// O(1) plus one inner index(); no allocation. Throws ferry::Error for position >= epoch_size().
  uint64_t index(uint64_t epoch, uint64_t position) const override;
  /// e.g. "sharded(rank=1/4, pad, shuffled(size=10, seed=3))"; a resumed one adds "resumed at epoch E
  /// after C".
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
  std::optional<Resume> resume_;
};

}  // namespace ferry
