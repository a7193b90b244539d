#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ferry/pipeline/engine_options.h"
#include "ferry/pipeline/pipeline_stats.h"
#include "ferry/pipeline/work_items.h"

namespace ferry::detail {

/// The collate node's state machine (Note [refilling batches]): takes decoded samples in plan order,
/// and cuts them into the items that go on towards the consumer: batches (their samples chosen and
/// numbered, not yet collated), tokens to give back, the end, an error.
///
/// In: every sample of every plan, markers included, in sequence order (what the sequencer hands
/// over). Out: items numbered 0, 1, 2, ... in the order they must reach the consumer.
/// Called by one thread at a time (the serial collate node); owns the samples it holds back.
class BatchCutter {
 public:
  struct Options {
    size_t batch_size = 1;
    bool drop_last = false;
    /// Batches are cut from the samples that decode (EngineOptions::refills()): a batch that lost
    /// samples is filled from the next ones, and each epoch's end comes as a kEpochEnd plan.
    bool refill = false;
    OnError on_error = OnError::kFail;
    uint64_t max_batches = 0;  // in all, counted from the run's start; 0: no cap
    uint64_t first_batch = 0;  // batches a resumed run's earlier runs delivered

    static Options of(const EngineOptions& options);
  };

  /// What one completed plan gave.
  struct Cut {
    std::vector<std::shared_ptr<BatchWork>> items;  // in order
    std::vector<SkippedSample> skipped;             // samples dropped under on_error: skip, in order
  };

  explicit BatchCutter(Options options);

  /// Takes the next sample. Once it completes its plan, returns what the plan gives: at most one
  /// batch (a plan adds at most batch_size samples to fewer than batch_size held back), else a kToken
  /// item, plus the end after max_batches batches or at the end of the run; or one kError item. Until
  /// then, and after the end, returns nothing. Throws ferry::Error for input out of order (a bug).
  Cut add(std::shared_ptr<SampleWork> sample);

  /// The end (or the error of an epoch that made no batch) was emitted: later plans give nothing.
  bool ended() const noexcept { return ended_; }

 private:
  using SamplePtr = std::shared_ptr<SampleWork>;
  using WorkPtr = std::shared_ptr<BatchWork>;

  void cut_plan(const BatchPlan& plan, std::vector<SamplePtr> samples, Cut& cut);
  /// A new item of `kind`, numbered, appended to `cut`.
  WorkPtr emit(BatchWork::Kind kind, Cut& cut);
  /// The first `count` held samples as the next batch; then the end, at max_batches.
  void emit_batch(size_t count, bool last_of_epoch, Cut& cut);
  /// The epoch's held rest as its last, smaller batch (dropped under drop_last); false if none.
  bool flush_epoch(Cut& cut);

  const Options options_;
  std::vector<SamplePtr> collecting_;  // the samples of the plan being gathered
  std::vector<SamplePtr> carry_;       // decoded samples of epoch carry_epoch_ not yet in a batch
  uint64_t carry_epoch_ = 0;
  bool in_epoch_ = false;     // a plan of carry_epoch_ has come
  uint64_t next_index_ = 0;   // the next batch's number within carry_epoch_
  uint64_t emitted_ = 0;      // items emitted (BatchWork::sequence)
  uint64_t batches_out_ = 0;  // batches emitted (BatchInfo::sequence)
  bool ended_ = false;        // the end (or an epoch without a batch's error) is emitted: later plans are dropped
  // Refill, for an epoch that makes no batch (Note [refilling batches]): whether carry_epoch_ was
  // planned from its start, its batches so far, the samples it kept and lost, the first one lost.
  bool epoch_whole_ = false;
  uint64_t epoch_batches_ = 0;
  uint64_t epoch_kept_ = 0;
  uint64_t epoch_lost_ = 0;
  std::optional<SkippedSample> epoch_first_lost_;
};

}  // namespace ferry::detail
