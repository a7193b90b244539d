#pragma once

#include <cstddef>
#include <functional>

#include <ATen/core/Tensor.h>

namespace ferry {

/// Hands out a batch's buffer as a slice of a larger allocation when the batch is small.
///
/// Note [carved device buffers]
/// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
/// libtorch's caching allocator takes ~10 us per device allocation in a pipeline like ferry's: each
/// batch's buffer is used on the consumer's stream (recordStream), so every free records an event and
/// every allocation first polls the events of earlier frees. For a 131 KB token batch that was the
/// largest part of the h2d stage's time. So batches of at most kMaxPiece bytes get slices of a chunk of
/// kChunkBytes, allocated once per chunk: the allocator sees one allocation, one recordStream per
/// consumer stream and one free per chunk instead of per batch. Nothing else changes: the chunk is an
/// ordinary allocation on ferry's copy stream, every batch's fields still share one storage (now the
/// chunk's), and the allocator reuses the chunk only once every batch cut from it is gone and their
/// streams' work is done. The cost: a batch kept alive keeps its whole chunk (at most kChunkBytes), and
/// torch.save of a field writes the chunk.
///
/// Slices start at multiples of kAlignment (what the allocator guarantees for an allocation of its
/// own), so a batch's layout is aligned as it would be in a buffer of its own. Serial: one caller at a
/// time (the h2d stage's prepare(), on pack's node: Note [work ahead]).
class BufferCarver {
 public:
  static constexpr size_t kChunkBytes = size_t{4} << 20;
  static constexpr size_t kMaxPiece = size_t{512} << 10;
  static constexpr size_t kAlignment = 512;

  /// `allocate(bytes)` makes a 1-D uint8 tensor of `bytes` (a chunk, or a large batch's own buffer).
  explicit BufferCarver(std::function<at::Tensor(size_t)> allocate) : allocate_(std::move(allocate)) {}

  /// A 1-D uint8 tensor of `bytes`: a view into the current chunk, or an allocation of its own.
  at::Tensor take(size_t bytes);

 private:
  std::function<at::Tensor(size_t)> allocate_;
  at::Tensor chunk_;  // the chunk slices are cut from; undefined before the first
  size_t used_ = 0;   // bytes of chunk_ handed out (rounded up to kAlignment)
};

}  // namespace ferry
