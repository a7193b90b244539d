#include "ferry/pipeline/sample_placer.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "ferry/pipeline/align_up.h"
#include "ferry/pipeline/error.h"

namespace ferry {

SamplePlacer::SamplePlacer(std::vector<Field> fields, std::shared_ptr<PinnedPool> pool, size_t direct_copy_bytes,
                           size_t sample_budget_bytes)
    : fields_(std::move(fields)),
      pool_(std::move(pool)),
      direct_copy_bytes_(direct_copy_bytes),
      sample_budget_bytes_(sample_budget_bytes) {
  if (fields_.empty()) throw Error("sample placer: no fields to place");
  if (!pool_) throw Error("sample placer: no pinned pool");
  if (fields_.size() > kMaxFields) fields_.resize(kMaxFields);
  for (const Field& field : fields_) {
    if (field.alignment == 0) throw Error("sample placer: a field's alignment is 0");
  }
}

std::shared_ptr<PlacedSlab> SamplePlacer::reserve(size_t samples, const std::atomic<bool>& stop,
                                                  std::atomic<uint64_t>& waited_ns) const {
  auto slab = std::make_shared<PlacedSlab>();
  slab->samples = samples;
  slab->fields.reserve(fields_.size());
  const size_t capacity = pool_->slab_bytes();
  size_t cursor = 0;
  for (const Field& field : fields_) {
    const size_t offset = align_up(cursor, field.alignment);  // as collate lays the field out
    // A batch larger than a slab is pack's to report, with its message.
    if (offset > capacity || (field.sample_bytes != 0 && samples > (capacity - offset) / field.sample_bytes)) {
      return nullptr;
    }
    slab->fields.push_back(PlacedSlab::Slot{offset, field.sample_bytes});
    cursor = offset + field.sample_bytes * samples;
  }

  // A slab whose copy is still running (Note [tokens]: one is free or about to be). The waits are
  // counted as the pool counts them, so that a snapshot meanwhile tells split's from pack's.
  std::optional<PinnedLease> lease = pool_->acquire_unless_stopped(stop, &waited_ns);
  if (!lease) return nullptr;
  slab->data = lease->data();
  slab->lease = std::move(*lease);
  return slab;
}

size_t SamplePlacer::place(SampleWork& sample) const {
  if (sample.slab == nullptr || sample.position >= sample.slab->samples) return 0;
  const size_t count = std::min(fields_.size(), sample.fields.size());
  size_t budget = sample_budget_bytes_;
  for (size_t f = 0; f < count; ++f) {
    at::Tensor& tensor = sample.fields[f];
    const PlacedSlab::Slot& slot = sample.slab->fields[f];
    // Left for pack: a field pending for (or decoded on) the GPU, one of another size, one past the
    // sample's budget (pack spreads large copies over the arena's threads), a strided one,
    // and a large pinned one that the copy engine reads in place (Note [direct copies]; is_pinned asks
    // CUDA, so only where the size makes it matter).
    if (!tensor.defined() || !tensor.device().is_cpu() || tensor.nbytes() != slot.sample_bytes ||
        slot.sample_bytes > budget || !tensor.is_contiguous()) {
      continue;
    }
    if (direct_copy_bytes_ != 0 && slot.sample_bytes >= direct_copy_bytes_ && tensor.is_pinned()) continue;
    if (slot.sample_bytes != 0) {
      std::memcpy(sample.slab->data + slot.offset + sample.position * slot.sample_bytes, tensor.data_ptr(),
                  slot.sample_bytes);
    }
    budget -= slot.sample_bytes;
    tensor = at::Tensor();  // freed here, by the thread that allocated it
    sample.placed |= uint64_t{1} << f;
  }
  return sample_budget_bytes_ - budget;
}

size_t SamplePlacer::unplace(SampleWork& sample) noexcept {
  size_t bytes = 0;
  if (sample.slab != nullptr) {
    for (size_t f = 0; f < sample.slab->fields.size(); ++f) {
      if (sample.is_placed(f)) bytes += sample.slab->fields[f].sample_bytes;
    }
  }
  sample.placed = 0;
  return bytes;
}

}  // namespace ferry
