#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::detail {

/// Whether the `size` bytes at `data` are a JPEG whose structure is whole: SOI, then segments whose
/// lengths fit in the file, with each scan's entropy-coded data followed by a marker, up to an EOI.
/// Bytes after the EOI are allowed (libjpeg ignores them too).
///
/// Why: nvJPEG's hardware decoder decodes a file cut short, or one with bytes between its header
/// segments, without an error and delivers made-up pixels for what is missing; libjpeg-turbo stops with
/// an error or a warning there, which ferry refuses (Note [GPU JPEG decode]). A file that fails this
/// check goes to the CPU decoder, which says what is wrong with it. What it cannot see, since only
/// decoding the Huffman codes would: damage inside a scan's data that keeps the structure (a flipped
/// bit), stray bytes right after a scan's data (they read as more data), and a scan cut short in a
/// file that still ends with an EOI.
bool jpeg_segments_complete(const uint8_t* data, size_t size);

}  // namespace ferry::detail
