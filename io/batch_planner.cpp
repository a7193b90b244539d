#include "io/batch_planner.h"

#include <algorithm>
#include <cstdint>

#include "pipeline/error.h"

namespace ferry {

BatchPlanner::BatchPlanner(std::shared_ptr<const Sampler> sampler, Options options)
    : sampler_(std::move(sampler)), options_(options) {
  if (!sampler_) throw Error("batch planner: no sampler");
  if (options_.batch_size == 0) throw Error("batch planner: batch_size must be at least 1");
  // Samplers are pure functions of (epoch, position), so a resumed run starts right at its batch.
  const uint64_t per_epoch = batches_per_epoch();
  if (per_epoch != 0) {
    epoch_ = options_.first_batch / per_epoch;
    batch_in_epoch_ = options_.first_batch % per_epoch;
  }
  planned_ = options_.first_batch;  // max_batches counts the whole run, resumed or not
}

uint64_t BatchPlanner::batches_per_epoch() const noexcept {
  const uint64_t samples = sampler_->epoch_size();
  const uint64_t size = options_.batch_size;
  return options_.drop_last ? samples / size : (samples + size - 1) / size;
}

uint64_t BatchPlanner::total_batches() const noexcept {
  const uint64_t per_epoch = batches_per_epoch();
  // Saturating: epochs may be huge ("run until max_batches").
  const uint64_t all = per_epoch != 0 && options_.epochs > UINT64_MAX / per_epoch ? UINT64_MAX : per_epoch * options_.epochs;
  const uint64_t end = options_.max_batches == 0 ? all : std::min(all, options_.max_batches);
  return end - std::min(end, options_.first_batch);
}

std::optional<BatchPlan> BatchPlanner::next() {
  if (options_.max_batches != 0 && planned_ >= options_.max_batches) return std::nullopt;
  const uint64_t per_epoch = batches_per_epoch();
  if (per_epoch == 0) return std::nullopt;  // no epoch has a batch: don't walk through them all
  while (epoch_ < options_.epochs && batch_in_epoch_ >= per_epoch) {
    ++epoch_;
    batch_in_epoch_ = 0;
  }
  if (epoch_ >= options_.epochs) return std::nullopt;

  const uint64_t samples = sampler_->epoch_size();
  const uint64_t first = batch_in_epoch_ * options_.batch_size;
  const uint64_t count = std::min<uint64_t>(options_.batch_size, samples - first);
  BatchPlan plan;
  plan.epoch = epoch_;
  plan.index = batch_in_epoch_;
  plan.sample_indices.resize(count);
  for (uint64_t k = 0; k < count; ++k) plan.sample_indices[k] = sampler_->index(epoch_, first + k);
  ++batch_in_epoch_;
  ++planned_;
  return plan;
}

}  // namespace ferry
