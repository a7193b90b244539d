#pragma once

#include "ferry/pipeline/stage.h"
#include "ferry/stages/pipeline_options.h"

namespace ferry {

/// Waits, off the consumer's thread, until a batch's copy has completed, then returns its staging
/// slab (with the pinned tensors it copied in place) to the pool. Runs on the pipeline's completion
/// thread, one batch at a time in order (copies on one stream complete in order, so the oldest
/// batch is always the next to finish).
///
/// Note [event polling]
/// ~~~~~~~~~~~~~~~~~~~~
/// The wait polls cudaEventQuery rather than blocking in cudaEventSynchronize: a blocked thread
/// cannot be told to stop, and a pipeline must shut down within a second even if a copy never
/// finishes. Polling yields for the first ~100 us — a copy of a few MiB finishes in that time, and
/// the batch's token returns promptly — then sleeps in short steps so an idle wait costs no core.
class EventWaitStage : public BatchStage {
 public:
  /// kSpin yields until the copy is done and never sleeps (lowest latency, one busy core).
  explicit EventWaitStage(WaitMode mode = WaitMode::kPoll) : mode_(mode) {}
  std::string_view name() const override { return "event-wait"; }
  /// Returns early, leaving the slab leased (with its event attached), when `stop` turns true.
  void run(BatchWork& work, const std::atomic<bool>& stop) override;

 private:
  WaitMode mode_;
};

}  // namespace ferry
