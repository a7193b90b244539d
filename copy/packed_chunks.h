#pragma once

#include <cstddef>
#include <vector>

#include "ferry/copy/copy_options.h"

namespace ferry::detail {

/// One tensor to pack: its byte size and element size.
struct PackItem {
  size_t bytes = 0;
  size_t element_size = 1;
};

/// A packed chunk: which items it holds (indices into the list given, in order), where each starts,
/// and its payload (the items' bytes plus the padding between them).
struct PackedChunk {
  std::vector<size_t> members;
  std::vector<size_t> offsets;
  size_t payload_bytes = 0;
};

/// Where a packed tensor may start: a multiple of this, the least common multiple of
/// `min_alignment` and `element_size` (so of their maximum, multi_tensor_copier's rule, and of the element size,
/// which a tensor's view needs); SIZE_MAX where that would not fit a size_t.
size_t packed_alignment(size_t min_alignment, size_t element_size);

/// Packs `items` greedily in their order: each starts at the next multiple of
/// packed_alignment(options.min_packed_alignment_bytes, its element size) after the one before, and a new chunk
/// starts when an item would take the payload past options.max_packed_chunk_bytes (or
/// kMaxPackedChunkBytes, if less). Every item must fit that limit (throws ferry::Error otherwise), so
/// each chunk holds at least one. Pure computation: allocates the result only; thread-safe.
std::vector<PackedChunk> plan_packed_chunks(const std::vector<PackItem>& items, const CopyOptions& options);

}  // namespace ferry::detail
