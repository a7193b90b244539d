#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/io/samplers/sampler.h"
#include "ferry/io/util/mixture_schedule.h"

namespace ferry {

/// The order of a weighted mixture's samples (see MixtureSource), for one data-parallel rank.
///
/// In: the schedule (which part each position takes), each part's own order over its samples (a
/// ShuffledSampler, a SequentialSampler; one rank's view of none: the mixture deals to ranks itself),
/// each part's first index in the mixture, the epoch's positions, and this rank among world_size.
///
/// Out: see Note [mixture order]. Every rank walks the same schedule, so at every position all ranks
/// take the same part and each rank's batches hold the weights' shares as closely as one rank's alone
/// would; the ranks split that part's samples between them. Nothing is stored per sample or per
/// epoch. Immutable; thread-safe as the schedule is (every method, any thread).
class MixtureSampler : public Sampler {
 public:
  struct Part {
    std::shared_ptr<const Sampler> order;  // over the part's own samples, 0 .. its size - 1
    uint64_t offset = 0;                   // its first index in the mixture
  };
  /// `samples`: positions of one epoch for all ranks together; each rank gets ceil(samples / W) of them
  /// (floor with drop_remainder). Throws ferry::Error for a part count other than the schedule's, a part
  /// without samples, world_size 0 or rank >= world_size.
  MixtureSampler(std::shared_ptr<const MixtureSchedule> schedule, std::vector<Part> parts, uint64_t samples,
                 uint64_t rank, uint64_t world_size, bool drop_remainder);

  uint64_t epoch_size() const override { return epoch_size_; }
  uint64_t index(uint64_t epoch, uint64_t position) const override;
  /// e.g. "mixture(smooth(0.7, 0.3), rank=0/2, [shuffled(size=10, seed=3), sequential(size=5)])".
  std::string describe() const override;
  bool same_samples_every_epoch() const override { return false; }
  /// position x world_size, at most the epoch's samples: every rank is at the same position.
  uint64_t consumed_before(uint64_t epoch, uint64_t position) const override;

 private:
  std::shared_ptr<const MixtureSchedule> schedule_;
  std::vector<Part> parts_;
  std::vector<uint64_t> sizes_;  // each part's epoch_size()
  uint64_t rank_;
  uint64_t world_size_;
  uint64_t samples_;
  uint64_t epoch_size_;
};

}  // namespace ferry
