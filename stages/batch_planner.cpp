#include "ferry/stages/batch_planner.h"

#include <algorithm>
#include <cstdint>

#include "ferry/pipeline/error.h"
#include "ferry/stages/read_progress.h"

namespace ferry {

BatchPlanner::Options BatchPlanner::Options::of(const EngineOptions& options) {
  return Options{options.batch_size,  options.drop_last, options.epochs,   options.max_batches,
                 options.first_batch, options.start,     options.refills()};
}

BatchPlanner::BatchPlanner(std::shared_ptr<const Sampler> sampler, Options options)
    : sampler_(std::move(sampler)), options_(std::move(options)) {
  if (!sampler_) throw Error("batch planner: no sampler");
  if (options_.batch_size == 0) throw Error("batch planner: batch_size must be at least 1");
  // Samplers are pure functions of (epoch, position), so a resumed run starts right at its batch.
  if (options_.start) {
    epoch_ = options_.start->epoch;
    index_ = options_.start->index;
    position_ = options_.start->position;
  } else if (const uint64_t per_epoch = batches_per_epoch(); per_epoch != 0) {
    epoch_ = options_.first_batch / per_epoch;
    index_ = options_.first_batch % per_epoch;
    position_ = index_ * options_.batch_size;
  }
  start_epoch_ = epoch_;
  start_position_ = position_;
  planned_ = options_.first_batch;  // max_batches counts the whole run, resumed or not
}

uint64_t BatchPlanner::epoch_limit() const noexcept {
  const uint64_t samples = sampler_->epoch_size();
  if (options_.refill || !options_.drop_last) return samples;
  return samples / options_.batch_size * options_.batch_size;
}

uint64_t BatchPlanner::batches_per_epoch() const noexcept {
  const uint64_t samples = sampler_->epoch_size();
  const uint64_t size = options_.batch_size;
  return options_.drop_last ? samples / size : (samples + size - 1) / size;
}

uint64_t BatchPlanner::first_epoch_batches() const noexcept {
  const uint64_t size = options_.batch_size;
  const uint64_t left = epoch_limit() - std::min(epoch_limit(), start_position_);
  // The rest of the first epoch, which may start mid-batch after skips.
  return options_.drop_last ? left / size : (left + size - 1) / size;
}

uint64_t BatchPlanner::batches_before(uint64_t epoch) const noexcept {
  if (epoch <= start_epoch_) return 0;
  const uint64_t first = first_epoch_batches();
  const uint64_t per_epoch = batches_per_epoch();
  const uint64_t epochs = epoch - start_epoch_ - 1;
  // Saturating: epochs may be huge ("run until max_batches").
  const uint64_t rest =
      per_epoch != 0 && epochs > (UINT64_MAX - first) / per_epoch ? UINT64_MAX - first : per_epoch * epochs;
  return first + rest;
}

uint64_t BatchPlanner::batches_left() const noexcept {
  if (options_.max_batches == 0) return UINT64_MAX;
  return options_.max_batches - std::min(options_.max_batches, options_.first_batch);
}

uint64_t BatchPlanner::total_batches() const noexcept {
  if (start_epoch_ >= options_.epochs) return 0;
  return std::min(batches_before(options_.epochs), batches_left());
}

uint64_t BatchPlanner::batches_in_epoch(uint64_t epoch) const noexcept {
  if (epoch < start_epoch_ || epoch >= options_.epochs) return 0;
  const uint64_t planned = epoch == start_epoch_ ? first_epoch_batches() : batches_per_epoch();
  const uint64_t budget = batches_left();
  const uint64_t before = batches_before(epoch);
  return std::min(planned, budget - std::min(budget, before));
}

std::optional<uint64_t> BatchPlanner::sample_at(uint64_t epoch, uint64_t position) const {
  const uint64_t size = sampler_->epoch_size();
  if (size == 0) return std::nullopt;
  return sampler_->index(epoch, position % size);
}

namespace {

// The planner's run as steps (Source::read_in_order): the first epoch from where the planner starts, then
// whole epochs, up to the run's end. Holds what it needs itself, so it outlives the planner safely.
class PlannedOrder : public ReadOrder {
 public:
  PlannedOrder(std::shared_ptr<const Sampler> sampler, uint64_t start_epoch, uint64_t start_position, uint64_t epochs,
               uint64_t limit, uint64_t steps, std::shared_ptr<const ReadProgress> progress, size_t readers)
      : sampler_(std::move(sampler)),
        start_epoch_(start_epoch),
        start_position_(start_position),
        epochs_(epochs),
        limit_(limit),
        steps_(steps),
        progress_(std::move(progress)),
        readers_(readers) {}

  uint64_t steps() const override { return steps_; }
  std::optional<uint64_t> sample_at_step(uint64_t step) const override {
    if (step >= steps_ || limit_ == 0) return std::nullopt;
    const uint64_t first = limit_ - std::min(limit_, start_position_);
    uint64_t epoch = start_epoch_, position = start_position_ + step;
    if (step >= first) {
      epoch = start_epoch_ + 1 + (step - first) / limit_;
      position = (step - first) % limit_;
    }
    if (epoch >= epochs_) return std::nullopt;
    return sampler_->index(epoch, position);
  }
  uint64_t reached() const override { return progress_->first_unfinished(); }
  size_t readers() const override { return readers_; }

 private:
  std::shared_ptr<const Sampler> sampler_;
  uint64_t start_epoch_, start_position_, epochs_, limit_, steps_;
  std::shared_ptr<const ReadProgress> progress_;
  size_t readers_;
};

}  // namespace

std::shared_ptr<const ReadOrder> BatchPlanner::read_order(size_t readers,
                                                          std::shared_ptr<ReadProgress> progress) const {
  // Samples the run plans: whole batches of batch_size but the last of each epoch, capped by max_batches.
  const uint64_t batches = total_batches();
  const uint64_t steps = batches > UINT64_MAX / options_.batch_size ? UINT64_MAX : batches * options_.batch_size;
  // The inverse of PlannedOrder::sample_at_step()'s walk: a read's (epoch, position) to its step.
  const uint64_t start_epoch = start_epoch_, start_position = start_position_, limit = epoch_limit();
  progress->count_steps([=](uint64_t epoch, uint64_t position) {
    if (epoch == start_epoch) return position - std::min(position, start_position);
    return limit - std::min(limit, start_position) + (epoch - start_epoch - 1) * limit + position;
  });
  return std::make_shared<PlannedOrder>(sampler_, start_epoch_, start_position_, options_.epochs, epoch_limit(), steps,
                                        std::move(progress), readers);
}

std::optional<BatchPlan> BatchPlanner::next() {
  if (epoch_end_due_) {
    BatchPlan marker;
    marker.kind = BatchPlan::Kind::kEpochEnd;
    marker.epoch = *epoch_end_due_;
    marker.same_samples_follow = *epoch_end_due_ + 1 < options_.epochs && sampler_->same_samples_every_epoch();
    epoch_end_due_.reset();
    return marker;
  }
  // With refill a plan may yield no batch, so collate counts the batches against max_batches; a run
  // resumed at or past them has none left either way.
  if (options_.max_batches != 0 && (options_.refill ? options_.first_batch : planned_) >= options_.max_batches) {
    return std::nullopt;
  }
  const uint64_t limit = epoch_limit();
  // No epoch has a batch: don't walk through them all (with refill the limit is the whole epoch).
  if (limit == 0 || (options_.drop_last && sampler_->epoch_size() < options_.batch_size)) return std::nullopt;
  while (epoch_ < options_.epochs && position_ >= limit) {
    ++epoch_;
    position_ = 0;
    index_ = 0;
  }
  if (epoch_ >= options_.epochs) return std::nullopt;

  const uint64_t count = std::min<uint64_t>(options_.batch_size, limit - position_);
  BatchPlan plan;
  plan.epoch = epoch_;
  plan.index = index_;
  plan.first_position = position_;
  plan.last_of_epoch = position_ + count >= limit;
  plan.sample_indices.resize(count);
  for (uint64_t k = 0; k < count; ++k) plan.sample_indices[k] = sampler_->index(epoch_, position_ + k);
  position_ += count;
  ++index_;
  ++planned_;
  if (options_.refill && plan.last_of_epoch) epoch_end_due_ = epoch_;
  return plan;
}

}  // namespace ferry
