#pragma once

#include <cstdint>
#include <memory>

#include "io/sampler.h"
#include "pipeline/stage.h"

namespace ferry {

/// Cuts the sampler's epochs into batches: batch_size samples each, the last one of an epoch smaller
/// unless drop_last; `epochs` epochs back to back; at most max_batches batches in all (0: no cap).
/// Called serially by the pipeline's source node.
class BatchPlanner : public BatchSource {
 public:
  struct Options {
    size_t batch_size = 32;
    bool drop_last = false;
    uint64_t epochs = 1;
    uint64_t max_batches = 0;  // in all, from the run's start: a resumed run continues the count
    /// Resume: the run's first `first_batch` batches (over all epochs) were delivered before.
    uint64_t first_batch = 0;
  };

  /// Throws ferry::Error for a zero batch size.
  BatchPlanner(std::shared_ptr<const Sampler> sampler, Options options);
  std::optional<BatchPlan> next() override;

  uint64_t batches_per_epoch() const noexcept;
  /// Batches this planner will plan, from first_batch on.
  uint64_t total_batches() const noexcept;

 private:
  std::shared_ptr<const Sampler> sampler_;
  Options options_;
  uint64_t epoch_ = 0;
  uint64_t batch_in_epoch_ = 0;
  uint64_t planned_ = 0;
};

}  // namespace ferry
