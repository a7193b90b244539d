#include "ferry/copy/packed_chunks.h"

#include <algorithm>
#include <string>

#include "ferry/pipeline/error.h"

namespace ferry::detail {

std::vector<PackedChunk> plan_packed_chunks(const std::vector<PackItem>& items, const CopyOptions& options) {
  const size_t limit = std::min(options.max_packed_chunk_bytes, kMaxPackedChunkBytes);
  std::vector<PackedChunk> chunks;
  for (size_t i = 0; i < items.size(); ++i) {
    const PackItem& item = items[i];
    if (item.bytes > limit) {
      throw Error(ErrorContext{"copy"}, "cannot pack " + std::to_string(item.bytes) + " bytes into chunks of at most " +
                                            std::to_string(limit));
    }
    const size_t alignment = std::max(options.min_packed_alignment_bytes, std::max<size_t>(item.element_size, 1));
    size_t offset = 0;
    bool fresh = chunks.empty();
    if (!fresh) {
      const size_t end = chunks.back().payload_bytes;  // at most limit
      const size_t pad = (alignment - end % alignment) % alignment;
      // Compared by subtraction, so that a huge alignment cannot overflow past the check.
      fresh = pad > limit - end || item.bytes > limit - end - pad;
      offset = fresh ? 0 : end + pad;
    }
    if (fresh) chunks.emplace_back();
    PackedChunk& chunk = chunks.back();
    chunk.members.push_back(i);
    chunk.offsets.push_back(offset);
    chunk.payload_bytes = offset + item.bytes;
  }
  return chunks;
}

}  // namespace ferry::detail
