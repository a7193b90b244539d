#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ferry/pipeline/pipeline_state.h>

namespace ferry::soak {

/// What a pipeline's samples do when one cannot be read or decoded.
enum class SkipMode {
  kFail,     // on_error: fail
  kRefill,   // on_error: skip, batches cut from the samples that survive (one rank)
  kReplace,  // on_error: skip with skip_replaces (several ranks): the next readable sample takes the place
};

/// What decides a run's batches, written down independently of ferry's planner and batch cutter:
/// this rank's order of each epoch (source indices by position, computed on demand: a run may have
/// 2^40 epochs and stop at max_batches), the batch options and which samples fail.
struct RunShape {
  std::function<const std::vector<uint64_t>&(uint64_t epoch)> order;
  uint64_t epochs = 1;
  uint64_t epoch_size = 0;
  bool same_samples_every_epoch = true;  // the sampler's Sampler::same_samples_every_epoch()
  size_t batch_size = 1;
  bool drop_last = false;
  uint64_t max_batches = 0;  // 0: no cap
  SkipMode mode = SkipMode::kFail;
  std::function<bool(uint64_t)> fails;
};

/// One batch the run must deliver, in delivery order.
struct ExpectedBatch {
  uint64_t epoch = 0;
  uint64_t index = 0;
  std::vector<uint64_t> samples;
  uint64_t first_position = 0;  // the epoch positions of its first and last sample (refill: of the
  uint64_t last_position = 0;   // survivors it holds; otherwise of its plan)
  bool last_of_epoch = false;   // fail and replace: the epoch's last plan (refill: unused)
};

/// The ferry::Error that ends the run after `batches.size()` batches.
struct ExpectedError {
  uint64_t sample = 0;  // the sample the error names
  uint64_t epoch = 0;
  std::optional<uint64_t> batch_index;  // none: a whole epoch that made no batch (refill)
};

struct ExpectedRun {
  std::vector<ExpectedBatch> batches;
  std::optional<ExpectedError> error;
};

/// ferry's limit on replacement tries (Note [replacing skipped samples]).
constexpr uint64_t kMaxReplacementTries = 100;

/// The whole uninterrupted run.
ExpectedRun expected_run(const RunShape& shape);

/// The skipped samples a pipeline records, in order, from cursor `start` on, as far as `limit`
/// entries (ferry records a plan's skips when collate takes the plan: refill, every failing
/// position; replace, each failed try of each position of a delivered plan).
std::vector<uint64_t> expected_skips(const RunShape& shape, const ExpectedRun& run, const BatchCursor& start,
                                     uint64_t first_batch, size_t limit);

/// How many skips a pipeline that started at `start` (the run's batch `first_batch`) has recorded
/// at least, having delivered up to the run's batch `delivered` (exclusive); and exactly, when it
/// then met its natural end (`ended`).
uint64_t expected_skip_count(const RunShape& shape, const ExpectedRun& run, const BatchCursor& start,
                             uint64_t first_batch, uint64_t delivered, bool ended);

/// "" when `cursor`, a pipeline's state().next after the run's batch `after` (0-based), is a right
/// place to resume: exactly the next plan for fail and replace; for refill, after that batch's last
/// sample and no later than the next batch's first. Otherwise what is wrong.
std::string check_cursor(const RunShape& shape, const ExpectedRun& run, uint64_t after, const BatchCursor& cursor);

}  // namespace ferry::soak
