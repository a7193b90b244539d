#include "ferry/io/samplers/mixture_sampler.h"

#include <algorithm>
#include <utility>

#include "ferry/pipeline/error.h"

namespace ferry {

// Note [mixture order]
// ~~~~~~~~~~~~~~~~~~~~
// Each part has a stream of samples: its own order's epoch 0, then its epoch 1, ... (a new shuffle each
// pass), so a part read more often than its size allows repeats in a new order rather than failing, and a
// part read less carries on in the next epoch where the previous one stopped. The schedule runs across
// epochs too: position p of epoch e is schedule position s = e x E + p (E: this rank's epoch size), which
// is what Megatron's blending order does over a whole run, and its counts say how far each part's stream
// has gone. With W ranks, every rank is at the same s at the same time and takes the same part k; the
// ranks take that part's stream positions in rounds: rank r's is before(s) x W + r, where before(s) is
// how many earlier positions took k. Dealing positions r, r + W, ... of one mixed sequence instead (as
// ShardedSampler deals a single source) would give a rank whole runs of one part: 0.5/0.5 alternates, and
// rank 0 of two would only see the first part.

MixtureSampler::MixtureSampler(std::shared_ptr<const MixtureSchedule> schedule, std::vector<Part> parts,
                               uint64_t samples, uint64_t rank, uint64_t world_size, bool drop_remainder)
    : schedule_(std::move(schedule)),
      parts_(std::move(parts)),
      rank_(rank),
      world_size_(world_size),
      samples_(samples) {
  if (!schedule_) throw Error("mixture sampler: no schedule");
  if (parts_.size() != schedule_->sources()) {
    throw Error("mixture sampler: " + std::to_string(parts_.size()) + " parts for a schedule of " +
                std::to_string(schedule_->sources()));
  }
  if (world_size_ == 0) throw Error("mixture sampler: world_size must be at least 1, got 0");
  if (rank_ >= world_size_) {
    throw Error("mixture sampler: rank " + std::to_string(rank_) + " must be less than world_size " +
                std::to_string(world_size_));
  }
  for (size_t k = 0; k < parts_.size(); ++k) {
    if (!parts_[k].order || parts_[k].order->epoch_size() == 0) {
      throw Error("mixture sampler: part " + std::to_string(k) + " has no samples");
    }
    sizes_.push_back(parts_[k].order->epoch_size());
  }
  epoch_size_ = samples / world_size_ + (!drop_remainder && samples % world_size_ != 0 ? 1 : 0);
}

uint64_t MixtureSampler::index(uint64_t epoch, uint64_t position) const {
  if (position >= epoch_size_) {
    throw Error("mixture sampler: position " + std::to_string(position) + " of epoch " + std::to_string(epoch) +
                " is outside the epoch of " + std::to_string(epoch_size_) + " samples");
  }
  const MixtureSchedule::Pick pick = schedule_->at(epoch * epoch_size_ + position);
  const uint64_t stream = pick.before * world_size_ + rank_;
  const uint64_t size = sizes_[pick.source];
  const Part& part = parts_[pick.source];
  return part.offset + part.order->index(stream / size, stream % size);
}

uint64_t MixtureSampler::consumed_before(uint64_t epoch, uint64_t position) const {
  (void)epoch;
  // position <= epoch_size_ <= samples_ / world_size_ + 1, so the product does not overflow.
  return std::min(samples_, position * world_size_);
}

std::string MixtureSampler::describe() const {
  std::string text = "mixture(" + schedule_->describe() + ", rank=" + std::to_string(rank_) + "/" +
                     std::to_string(world_size_) + ", [";
  for (size_t k = 0; k < parts_.size(); ++k) text += (k ? ", " : "") + parts_[k].order->describe();
  return text + "])";
}

}  // namespace ferry
