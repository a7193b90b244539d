#include "ferry/io/samplers/sharded_sampler.h"

#include <algorithm>

#include "ferry/pipeline/error.h"

namespace ferry {

namespace {

std::shared_ptr<const Sampler> checked(std::shared_ptr<const Sampler> inner) {
  if (!inner) throw Error("sharded sampler: inner sampler is null");
  return inner;
}

}  // namespace

ShardedSampler::ShardedSampler(std::shared_ptr<const Sampler> inner, uint64_t rank, uint64_t world_size,
                               Remainder remainder, std::optional<Resume> resume)
    : inner_(checked(std::move(inner))), rank_(rank), world_size_(world_size), remainder_(remainder), resume_(resume) {
  if (world_size_ == 0) throw Error("sharded sampler: world_size must be at least 1, got 0");
  if (rank_ >= world_size_) {
    throw Error("sharded sampler: rank " + std::to_string(rank_) + " must be less than world_size " +
                std::to_string(world_size_));
  }
  inner_size_ = inner_->epoch_size();
  // Written without n + W - 1, which would overflow for n near 2^64.
  const uint64_t whole = inner_size_ / world_size_;
  const bool partial = inner_size_ % world_size_ != 0;
  epoch_size_ = remainder_ == Remainder::kPad && partial ? whole + 1 : whole;
  if (resume_ && (resume_->consumed >= inner_size_ || resume_->position > epoch_size_)) {
    throw Error("sharded sampler: resume point (" + std::to_string(resume_->consumed) + " samples taken, position " +
                std::to_string(resume_->position) + ") is outside the epoch of " + std::to_string(inner_size_) +
                " samples (" + std::to_string(epoch_size_) + " a rank)");
  }
}

uint64_t ShardedSampler::index(uint64_t epoch, uint64_t position) const {
  if (position >= epoch_size_) {
    throw Error("sharded sampler (rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) +
                "): position " + std::to_string(position) + " of epoch " + std::to_string(epoch) +
                " is outside the epoch of " + std::to_string(epoch_size_) + " samples");
  }
  // The global position is base + rank_, past the epoch's end wrapping to its start (padding). base < n
  // but in a resumed epoch, whose positions past the rest it deals (read only to replace a skipped sample
  // under drop_last) pass n; base + rank_ may pass n or even 2^64, so compare before adding.
  uint64_t base = position * world_size_;
  if (resume_ && epoch == resume_->epoch && position >= resume_->position) {
    base = (resume_->consumed + (position - resume_->position) * world_size_) % inner_size_;
  }
  const uint64_t room = inner_size_ - base;  // > 0
  const uint64_t inner_position = rank_ < room ? base + rank_ : (rank_ - room) % inner_size_;
  return inner_->index(epoch, inner_position);
}

uint64_t ShardedSampler::consumed_before(uint64_t epoch, uint64_t position) const {
  // position <= epoch_size_ <= n / W + 1: no overflow.
  if (resume_ && epoch == resume_->epoch && position >= resume_->position) {
    return std::min(inner_size_, resume_->consumed + (position - resume_->position) * world_size_);
  }
  return std::min(inner_size_, position * world_size_);
}

std::string ShardedSampler::describe() const {
  std::string text = "sharded(rank=" + std::to_string(rank_) + "/" + std::to_string(world_size_) + ", " +
                     (remainder_ == Remainder::kPad ? "pad" : "drop");
  if (resume_) {
    text += ", resumed at epoch " + std::to_string(resume_->epoch) + " after " + std::to_string(resume_->consumed);
  }
  return text + ", " + inner_->describe() + ")";
}

}  // namespace ferry
