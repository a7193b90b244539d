#pragma once

#include <memory>

#include "ferry/pipeline/pinned_pool.h"
#include "ferry/pipeline/stage.h"
#include "ferry/stages/pipeline_options.h"

namespace ferry {

/// Copies a collated batch into one staging slab of the pinned pool: every sample's field bytes to
/// their slot of the BatchLayout, pad values after short samples, collate-made tensors (lengths) as
/// they are. Large batches are copied by several threads (run_copies). A large decoded tensor that
/// is already pinned is not copied: its slot is copied to the device from the tensor itself. Fields
/// the decode threads already placed in the batch's slab are not copied either (the batch comes with
/// that slab: Note [placing samples]); pack checks that they lie where the layout puts them. The
/// result is a list of chunks of at most transfer.max_chunk_bytes: one cudaMemcpyAsync each.
///
/// Serial. Never blocks while the pipeline's token invariant holds (Note [tokens]): the pool has a
/// slab for every batch in flight.
class PackStage : public BatchStage {
 public:
  PackStage(std::shared_ptr<PinnedPool> pool, const TransferOptions& options);
  std::string_view name() const override { return "pack"; }
  /// Throws ferry::Error when the batch does not fit in a slab, or a decoded tensor is not on the CPU.
  void run(BatchWork& work, const std::atomic<bool>& stop) override;

 private:
  std::shared_ptr<PinnedPool> pool_;
  TransferOptions options_;
};

}  // namespace ferry
