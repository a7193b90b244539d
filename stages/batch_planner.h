#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "ferry/io/formats/source.h"
#include "ferry/io/samplers/sampler.h"
#include "ferry/pipeline/engine_options.h"
#include "ferry/pipeline/pipeline_state.h"
#include "ferry/pipeline/stage.h"

namespace ferry {

class ReadProgress;

/// Cuts the sampler's epochs into batches: batch_size samples each, the last one of an epoch smaller
/// unless drop_last; `epochs` epochs back to back; at most max_batches batches in all (0: no cap).
/// Called serially by the pipeline's source node.
///
/// With `refill` (on_error: skip) the plans are only the order samples are read in: collate cuts the
/// batches from the samples that survive decoding (Note [refilling batches] in
/// pipeline/batch_cutter.cpp). The planner then plans every sample of an epoch (under drop_last
/// too: the tail fills batches that lost samples), follows each epoch's last plan with a kEpochEnd
/// marker, and leaves max_batches to collate.
class BatchPlanner : public BatchSource {
 public:
  struct Options {
    size_t batch_size = 32;
    bool drop_last = false;
    uint64_t epochs = 1;
    uint64_t max_batches = 0;  // in all, from the run's start: a resumed run continues the count
    /// Resume: the run's first `first_batch` batches (over all epochs) were delivered before.
    uint64_t first_batch = 0;
    /// Resume: where first_batch starts. Unset: first_batch x batch_size over whole epochs.
    std::optional<BatchCursor> start;
    bool refill = false;

    /// The planner a pipeline with these options runs (make_pipeline(), planned_batches()).
    static Options of(const EngineOptions& options);
  };

  /// Throws ferry::Error for a zero batch size.
  BatchPlanner(std::shared_ptr<const Sampler> sampler, Options options);
  std::optional<BatchPlan> next() override;
  /// The sampler's sample at `position` (modulo the epoch's size) of `epoch`. Thread-safe.
  std::optional<uint64_t> sample_at(uint64_t epoch, uint64_t position) const override;
  std::optional<uint64_t> consumed_before(uint64_t epoch, uint64_t position) const override {
    return sampler_->consumed_before(epoch, position);
  }

  /// Batches in a whole epoch.
  uint64_t batches_per_epoch() const noexcept;
  /// The epoch this planner starts in (a resumed run's).
  uint64_t first_epoch() const noexcept { return start_epoch_; }
  /// Batches this planner plans in `epoch`: its part after where the planner starts, and none past
  /// max_batches (with refill: at most this many are delivered). 0 outside the run's epochs.
  uint64_t batches_in_epoch(uint64_t epoch) const noexcept;
  /// The order this planner's run reads samples in, step by step (Source::read_in_order). `progress`: how
  /// far the decode stage's `readers` threads have read. Thread-safe; it may outlive the planner.
  std::shared_ptr<const ReadOrder> read_order(size_t readers, std::shared_ptr<ReadProgress> progress) const;
  /// Batches this planner will plan, from where it starts on (with refill: at most this many are
  /// delivered; fewer when skipped samples shorten epochs).
  uint64_t total_batches() const noexcept;

 private:
  /// Positions [0, limit) of an epoch are planned: all of them, or the whole batches under drop_last.
  uint64_t epoch_limit() const noexcept;
  /// Batches planned in the first epoch (from where the planner starts in it).
  uint64_t first_epoch_batches() const noexcept;
  /// Batches planned before `epoch` (saturating), max_batches aside.
  uint64_t batches_before(uint64_t epoch) const noexcept;
  /// Batches max_batches leaves this run (UINT64_MAX: no cap).
  uint64_t batches_left() const noexcept;

  std::shared_ptr<const Sampler> sampler_;
  Options options_;
  uint64_t epoch_ = 0;
  uint64_t position_ = 0;     // next sampler position in epoch_
  uint64_t index_ = 0;        // next plan's number within epoch_
  uint64_t start_epoch_ = 0;  // where this planner started, for total_batches()
  uint64_t start_position_ = 0;
  uint64_t planned_ = 0;
  std::optional<uint64_t> epoch_end_due_;  // refill: the epoch whose kEpochEnd marker comes next
};

}  // namespace ferry
