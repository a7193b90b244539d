#include "ferry/copy/packed_chunks.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>

#include "ferry/pipeline/error.h"

namespace ferry::detail {

// multi_tensor_copier's rule (ACCV-Lab): each packed tensor starts at a multiple of max(min_packed_alignment_bytes, its
// element size), for any minimum of at least 1. With a minimum that is not a power of two (6, say)
// that offset need not be a multiple of the element size (6 for a float), and a tensor cannot start
// there: its view counts its storage offset in elements. So a tensor starts at a multiple of the
// least common multiple of the two, which is a multiple of their maximum (the copier's guarantee
// holds) and the maximum itself whenever one divides the other (every power of two: the same layout
// as the copier's). An lcm past SIZE_MAX comes out as SIZE_MAX: such a tensor can only start a chunk.
size_t packed_alignment(size_t min_alignment, size_t element_size) {
  const size_t element = std::max<size_t>(element_size, 1);
  const size_t minimum = std::max<size_t>(min_alignment, 1);
  const size_t factor = element / std::gcd(minimum, element);
  return minimum > SIZE_MAX / factor ? SIZE_MAX : minimum * factor;
}

std::vector<PackedChunk> plan_packed_chunks(const std::vector<PackItem>& items, const CopyOptions& options) {
  const size_t limit = std::min(options.max_packed_chunk_bytes, kMaxPackedChunkBytes);
  std::vector<PackedChunk> chunks;
  for (size_t i = 0; i < items.size(); ++i) {
    const PackItem& item = items[i];
    if (item.bytes > limit) {
      throw Error(ErrorContext{"copy"}, "cannot pack " + std::to_string(item.bytes) + " bytes into chunks of at most " +
                                            std::to_string(limit));
    }
    const size_t alignment = packed_alignment(options.min_packed_alignment_bytes, item.element_size);
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
