#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::detail {

/// Whether the `size` bytes at `data` are a JPEG whose structure is whole: SOI, then segments whose
/// lengths fit in the file, with each scan's entropy-coded data followed by a marker, up to an EOI.
/// Bytes after the EOI are allowed (libjpeg ignores them too).
///
/// Why: nvJPEG's hardware decoder decodes a file cut short, or one with bytes between its segments,
/// without an error and delivers made-up pixels for what is missing; libjpeg-turbo stops with an error
/// or a warning there, which ferry refuses (Note [GPU JPEG decode]). A file that fails this check goes
/// to the CPU decoder, which says what is wrong with it. It does not see damage inside entropy-coded
/// data that keeps the structure (a flipped bit); only decoding its Huffman codes would.
bool jpeg_segments_complete(const uint8_t* data, size_t size);

}  // namespace ferry::detail
