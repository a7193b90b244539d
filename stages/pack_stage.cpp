#include "stages/pack_stage.h"

#include <chrono>

#include "pipeline/error.h"
#include "stages/parallel_copy.h"

namespace ferry {

PackStage::PackStage(std::shared_ptr<PinnedPool> pool, const TransferOptions& options)
    : pool_(std::move(pool)), options_(options) {
  if (!pool_) throw Error("pack stage: no pinned pool");
}

void PackStage::run(BatchWork& work, const std::atomic<bool>& stop) {
  const BatchLayout& layout = work.layout;
  if (layout.total_bytes > pool_->slab_bytes()) {
    throw Error("the batch packs to " + std::to_string(layout.total_bytes) + " bytes but a staging slab holds " +
                std::to_string(pool_->slab_bytes()) + "; raise pool.slab_bytes");
  }
  std::optional<PinnedLease> lease = pool_->try_acquire();
  while (!lease) {  // only with a pool smaller than the tokens: see Note [tokens]
    if (stop.load(std::memory_order_acquire)) return;
    lease = pool_->acquire(std::chrono::milliseconds(20));
  }
  std::byte* const slab = lease->data();

  // Non-contiguous decoder outputs are made contiguous first; `keep` holds those copies alive.
  std::vector<at::Tensor> keep;
  auto bytes_of = [&keep](const at::Tensor& tensor) -> const std::byte* {
    if (!tensor.device().is_cpu()) throw Error("a decoded tensor is on " + tensor.device().str() + ", not the CPU");
    if (tensor.is_contiguous()) return static_cast<const std::byte*>(tensor.data_ptr());
    keep.push_back(tensor.contiguous());
    return static_cast<const std::byte*>(keep.back().data_ptr());
  };

  std::vector<CopyOp> ops;
  ops.reserve(work.samples.size() * layout.fields.size() + layout.fields.size());
  for (const FieldLayout& field : layout.fields) {
    std::byte* target = slab + field.offset;
    if (field.source_field < 0) {
      if (field.bytes != 0) ops.push_back(CopyOp{target, bytes_of(field.made), field.bytes, {}, 1});
      continue;
    }
    const size_t element = c10::elementSize(field.dtype);
    for (const auto& sample : work.samples) {
      const at::Tensor& tensor = sample->fields[static_cast<size_t>(field.source_field)];
      const size_t bytes = tensor.nbytes();
      if (bytes != 0) ops.push_back(CopyOp{target, bytes_of(tensor), bytes, {}, 1});
      if (field.padded && bytes < field.slot_bytes) {
        ops.push_back(CopyOp{target + bytes, nullptr, field.slot_bytes - bytes, field.pad, element});
      }
      target += field.slot_bytes;
    }
  }
  run_copies(ops, options_.parallel_pack_bytes);

  work.chunks.clear();
  for (size_t offset = 0; offset < layout.total_bytes; offset += options_.max_chunk_bytes) {
    work.chunks.push_back(ByteRange{offset, std::min(options_.max_chunk_bytes, layout.total_bytes - offset)});
  }
  work.slab = std::move(*lease);
}

}  // namespace ferry
