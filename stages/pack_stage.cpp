#include "ferry/stages/pack_stage.h"

#include <algorithm>
#include <iterator>
#include <mutex>

#include "ferry/pipeline/error.h"
#include "ferry/pipeline/field_loop.h"
#include "ferry/stages/parallel_copy.h"

namespace ferry {

// Note [direct copies]
// ~~~~~~~~~~~~~~~~~~~~
// Staging costs three bytes of host memory traffic per byte delivered: the CPU reads the decoded
// tensor, writes the slab, and the copy engine reads the slab. For large batches that, not the link,
// is the limit (docs/benchmarks.md, bench/transfer). A decoded tensor that is already in pinned memory needs
// none of it: the copy engine can read it in place. So a contiguous pinned tensor of at least
// TransferOptions::direct_copy_bytes (1 MiB; 0: never) gets no CopyOp; its byte range becomes a
// CopyChunk whose source is the tensor itself, and the slab's chunks are cut around it, so the
// device buffer's layout is the same either way. A padded slot is always staged (the padding has to
// be written somewhere). Smaller tensors are staged anyway: one cudaMemcpyAsync each would cost
// more than the memcpy saves.
//
// The tensor must outlive the copy that reads it, whatever ends the batch (delivery, an error,
// shutdown): pack keeps it in BatchWork::direct_sources, and H2DSubmitStage hands those to the slab's
// lease together with the copy's event (PinnedLease::attach_event), so they are released with the
// slab, after the event has completed (Note [pinned slab reuse]).

namespace {

// What staging one field leaves besides its copies: ranges copied in place (Note [direct copies]),
// fields decoded on the device, and contiguous copies of non-contiguous tensors, kept alive until the
// copies that read them have run.
struct Staged {
  std::vector<CopyChunk> direct;
  std::vector<at::Tensor> direct_sources;
  std::vector<std::pair<size_t, at::Tensor>> device_sources;
  std::vector<at::Tensor> keep;

  // What outlives the copies: all but `keep`.
  bool leaves_nothing() const { return direct.empty() && device_sources.empty(); }
  void take(Staged& other) {
    auto append = [](auto& to, auto& from) {
      to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
    };
    append(direct, other.direct);
    append(direct_sources, other.direct_sources);
    append(device_sources, other.device_sources);
  }
};

// The copies that fill `field`'s slots of the slab (appended to `ops`), and what else it leaves in `staged`.
void stage_field(const BatchWork& work, const FieldLayout& field, std::byte* slab, size_t direct_copy_bytes,
                 std::vector<CopyOp>& ops, Staged& staged) {
  // Non-contiguous decoder outputs are made contiguous first; `keep` holds those copies alive.
  auto bytes_of = [&staged](const at::Tensor& tensor) -> const std::byte* {
    if (!tensor.device().is_cpu()) throw Error("a decoded tensor is on " + tensor.device().str() + ", not the CPU");
    if (tensor.is_contiguous()) return static_cast<const std::byte*>(tensor.data_ptr());
    staged.keep.push_back(tensor.contiguous());
    return static_cast<const std::byte*>(staged.keep.back().data_ptr());
  };
  // Large pinned tensors are copied from where they are (Note [direct copies]).
  auto copy_in_place = [&](const at::Tensor& tensor, size_t offset) {
    if (direct_copy_bytes == 0 || tensor.nbytes() < direct_copy_bytes || !tensor.is_contiguous() ||
        !tensor.is_pinned()) {
      return false;
    }
    staged.direct.push_back(CopyChunk{offset, static_cast<const std::byte*>(tensor.data_ptr()), tensor.nbytes()});
    staged.direct_sources.push_back(tensor);
    return true;
  };

  size_t offset = field.offset;
  if (field.host) return;  // collated on the host, not copied
  if (field.source_field < 0) {
    if (field.bytes != 0) ops.push_back(CopyOp{slab + offset, bytes_of(field.made), field.bytes, {}, 1});
    return;
  }
  const size_t element = c10::elementSize(field.dtype);
  const bool list = !field.list_offsets.empty();
  for (size_t s = 0; s < work.samples.size(); ++s) {
    const auto& sample = work.samples[s];
    if (list) {  // back to back, each at its own size: no slots, no padding
      const at::Tensor& tensor = sample->fields[static_cast<size_t>(field.source_field)];
      const size_t at = field.offset + field.list_offsets[s];
      if (tensor.is_cuda()) {
        staged.device_sources.emplace_back(at, tensor);
      } else if (tensor.nbytes() != 0 && !copy_in_place(tensor, at)) {
        ops.push_back(CopyOp{slab + at, bytes_of(tensor), tensor.nbytes(), {}, 1});
      }
      continue;
    }
    if (sample->cached) {  // its slot is written by the gather, after the copy
      offset += field.slot_bytes;
      continue;
    }
    if (sample->is_placed(static_cast<size_t>(field.source_field))) {  // Note [placing samples]
      const PlacedSlab::Slot& slot = sample->slab->fields[static_cast<size_t>(field.source_field)];
      if (sample->slab->data != slab || slot.offset + sample->position * slot.sample_bytes != offset ||
          slot.sample_bytes != field.slot_bytes) {
        throw Error("internal error: field " + std::to_string(field.source_field) + " of sample " +
                    std::to_string(sample->index()) + " was placed where collate did not lay it out");
      }
      offset += field.slot_bytes;
      continue;
    }
    const at::Tensor& tensor = sample->fields[static_cast<size_t>(field.source_field)];
    const size_t bytes = tensor.nbytes();
    if (tensor.is_cuda()) {  // decoded on the device (Note [GPU JPEG decode]): h2d copies it there
      if (field.padded && bytes < field.slot_bytes) {
        throw Error("a field decoded on the GPU cannot be padded (field " + std::to_string(field.source_field) + ")");
      }
      staged.device_sources.emplace_back(offset, tensor);
      offset += field.slot_bytes;
      continue;
    }
    if (!(field.padded && bytes < field.slot_bytes) && copy_in_place(tensor, offset)) {
      offset += field.slot_bytes;
      continue;
    }
    if (bytes != 0) ops.push_back(CopyOp{slab + offset, bytes_of(tensor), bytes, {}, 1});
    if (field.padded && bytes < field.slot_bytes) {
      ops.push_back(CopyOp{slab + offset + bytes, nullptr, field.slot_bytes - bytes, field.pad, element});
    }
    offset += field.slot_bytes;
  }
}

}  // namespace

PackStage::PackStage(std::shared_ptr<PinnedPool> pool, const TransferOptions& options)
    : pool_(std::move(pool)), options_(options) {
  if (!pool_) throw Error("pack stage: no pinned pool");
}

void PackStage::run(BatchWork& work, const std::atomic<bool>& stop) {
  const BatchLayout& layout = work.layout;
  work.chunks.clear();
  work.direct_sources.clear();
  work.device_sources.clear();
  // Cached samples are gathered on the device (Note [dataset cache]); a batch of them only needs no slab.
  if (std::all_of(work.samples.begin(), work.samples.end(), [](const auto& sample) { return sample->cached; })) return;
  if (layout.total_bytes > pool_->slab_bytes()) {
    throw Error("the batch packs to " + std::to_string(layout.total_bytes) + " bytes but a staging slab holds " +
                std::to_string(pool_->slab_bytes()) + "; raise pool.slab_bytes");
  }
  if (!work.slab) {  // else the slab the samples were placed in (Note [placing samples])
    // Waits only with a pool smaller than the tokens: see Note [tokens].
    std::optional<PinnedLease> lease = pool_->acquire_unless_stopped(stop);
    if (!lease) return;
    work.slab = std::move(*lease);
  }
  std::byte* const slab = work.slab.data();

  Staged staged;
  if (layout.fields.size() < kWideBatchFields) {
    std::vector<CopyOp> ops;
    ops.reserve(work.samples.size() * layout.fields.size() + layout.fields.size());
    for (const FieldLayout& field : layout.fields)
      stage_field(work, field, slab, options_.direct_copy_bytes, ops, staged);
    run_copies(ops, options_.parallel_pack_bytes);
  } else {
    // A wide batch: each field's copies are listed and run on the thread that takes the field (Note [wide
    // batches]); run_copies still spreads a large field's bytes.
    std::mutex mutex;
    for_each_field(layout.fields.size(), [&](size_t f) {
      std::vector<CopyOp> ops;
      Staged mine;
      stage_field(work, layout.fields[f], slab, options_.direct_copy_bytes, ops, mine);
      run_copies(ops, options_.parallel_pack_bytes);
      if (mine.leaves_nothing()) return;  // its `keep` copies are read: they go with it
      std::lock_guard lock(mutex);
      staged.take(mine);
    });
    std::sort(staged.direct.begin(), staged.direct.end(),
              [](const CopyChunk& a, const CopyChunk& b) { return a.offset < b.offset; });
  }
  work.direct_sources = std::move(staged.direct_sources);
  work.device_sources = std::move(staged.device_sources);

  // The slab's bytes around the direct ranges, and the direct ranges, each cut to max_chunk_bytes.
  auto add = [&](size_t offset, const std::byte* source, size_t bytes) {
    for (size_t done = 0; done < bytes; done += options_.max_chunk_bytes) {
      work.chunks.push_back(CopyChunk{offset + done, source + done, std::min(options_.max_chunk_bytes, bytes - done)});
    }
  };
  size_t cursor = 0;
  for (const CopyChunk& range : staged.direct) {
    add(cursor, slab + cursor, range.offset - cursor);
    add(range.offset, range.source, range.bytes);
    cursor = range.offset + range.bytes;
  }
  add(cursor, slab + cursor, layout.total_bytes - cursor);
}

}  // namespace ferry
