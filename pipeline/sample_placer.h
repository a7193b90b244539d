#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ferry/pipeline/pinned_pool.h"
#include "ferry/pipeline/work_items.h"

namespace ferry {

/// Note [placing samples]
/// ~~~~~~~~~~~~~~~~~~~~~~
/// A fixed-size field's place in the packed batch is known before any sample is decoded: sample p of
/// the plan lands at the field's offset plus p slots, whatever the other samples hold. So for the
/// batch's leading fixed-size fields (those before the first variable-length one, whose offsets no
/// sample's length moves) the split node leases the plan's staging slab, and each decode thread copies
/// its sample's fields into their slots as soon as they are decoded, then drops the decoded tensors.
/// Pack copies only what is left: the variable-length fields, and any field a sample could not place.
///
/// Why: pack is one serial node, and for large batches its copy was the pipeline's limit (H200,
/// 256 x 3 x 224 x 224 uint8 batches: 1.4-1.6 ms a 38.5 MB batch, about 25 GB/s, with the consumer
/// waiting). The decode threads copy in parallel instead, each while its sample is still in its
/// cache, so the decoded bytes are not written to memory and read back; and they free their own
/// tensors, which pack (or the release tasks, Note [releasing samples]) would free from another
/// thread's malloc arena.
///
/// What stays as it was: collate still checks every sample's shape (a placed field has the source's
/// fixed shape: DecodeStage checks it) and lays the batch out; pack checks that each placed field's
/// slots are where collate put the field, so the bytes the copy engine reads are the batch's. The slab
/// is leased in plan order, at most one a plan, and plans hold tokens, so the pool (at least
/// `prefetch` slabs) still always has one (Note [tokens]): the completion thread returns a batch's slab
/// before it hands the batch over, since the token the consumer then gives back admits a plan that
/// leases at once. At shutdown the wait gives up.
///
/// A sample replaced after a failure (Note [replacing skipped samples]) may have placed some fields
/// before another failed, e.g. a label before its image failed on the GPU decoder: the replacement's
/// fields take those slots, placed again or packed, and the failed sample's bytes are not counted.
///
/// One sample places at most TransferOptions::parallel_pack_bytes (1 MiB): a few large fields are one
/// thread's copy here but all threads' in pack (run_copies), and placing them all made bench/transfer's
/// 4 x 16 MiB sample half as fast (H200: 26.6-28.9 GB/s to 14.6-15.1).
///
/// Not placed: a field decoded on the GPU (Note [GPU JPEG decode]), a pinned tensor that pack copies
/// from in place (Note [direct copies]), a non-contiguous one, and every field of a pipeline whose
/// batches are re-cut from the samples that decode (on_error: skip without replacing: a sample's batch
/// is not known when it is decoded) or that keeps decoded samples in a dataset cache.
class SamplePlacer {
 public:
  /// One of the batch's leading fixed-size fields.
  struct Field {
    size_t sample_bytes = 0;  // one sample's bytes
    size_t alignment = 1;     // the field starts at a multiple of this (collate's rule)
  };
  /// At most this many leading fields are placed.
  static constexpr size_t kMaxFields = PlacedSlab::kMaxFields;

  /// `fields`: the leading fixed-size fields, in order (at most kMaxFields are used). `pool`: the pool
  /// pack leases from. `direct_copy_bytes`: TransferOptions' (pinned tensors that large are not placed).
  /// `sample_budget_bytes`: the most bytes one sample places (TransferOptions::parallel_pack_bytes): its
  /// other fields are left to pack, which spreads large copies over the arena's threads.
  /// Throws ferry::Error for no fields, a null pool or an alignment that is 0.
  SamplePlacer(std::vector<Field> fields, std::shared_ptr<PinnedPool> pool, size_t direct_copy_bytes,
               size_t sample_budget_bytes);

  /// A slab for a plan of `samples` samples, with its fields' slots; null when the fields do not fit a
  /// slab (pack then reports it) or `stop` turned true while it waited for one. Called by the split
  /// node, in plan order. `waited_ns` gains the time it waited for a free slab.
  std::shared_ptr<PlacedSlab> reserve(size_t samples, const std::atomic<bool>& stop,
                                      std::atomic<uint64_t>& waited_ns) const;

  /// Copies each of `sample`'s decoded fields that can be placed into its slot of sample.slab, drops
  /// the tensor and sets the field's bit in sample.placed; returns the bytes copied. Thread-safe for
  /// distinct samples.
  size_t place(SampleWork& sample) const;

  /// Forgets which of `sample`'s fields are placed, as when a replacement takes its place (their slots
  /// are then written again, by place() or by pack); returns their bytes.
  static size_t unplace(SampleWork& sample) noexcept;

 private:
  std::vector<Field> fields_;
  std::shared_ptr<PinnedPool> pool_;
  size_t direct_copy_bytes_;
  size_t sample_budget_bytes_;
};

}  // namespace ferry
