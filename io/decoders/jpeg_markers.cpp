#include "ferry/io/decoders/jpeg_markers.h"

#include <cstring>

namespace ferry::detail {
namespace {

constexpr uint8_t kMarker = 0xFF;
constexpr uint8_t kStartOfImage = 0xD8;
constexpr uint8_t kEndOfImage = 0xD9;
constexpr uint8_t kStartOfScan = 0xDA;
constexpr uint8_t kStuffedZero = 0x00;  // FF 00 in entropy-coded data: a data byte FF
constexpr uint8_t kFirstRestart = 0xD0, kLastRestart = 0xD7;
constexpr uint8_t kTemporary = 0x01;  // TEM: a marker without a length

bool is_restart(uint8_t code) { return code >= kFirstRestart && code <= kLastRestart; }

// The offset of the marker that ends the entropy-coded data starting at `at` (its FF), or `size` when
// the data runs to the end of the file.
size_t end_of_scan(const uint8_t* data, size_t size, size_t at) {
  while (at < size) {
    const void* found = std::memchr(data + at, kMarker, size - at);
    if (found == nullptr) return size;
    at = static_cast<size_t>(static_cast<const uint8_t*>(found) - data);
    if (at + 1 >= size) return size;
    const uint8_t code = data[at + 1];
    if (code == kStuffedZero || is_restart(code)) {
      at += 2;
    } else if (code == kMarker) {
      at += 1;  // a fill byte before a marker
    } else {
      return at;
    }
  }
  return size;
}

}  // namespace

bool jpeg_segments_complete(const uint8_t* data, size_t size) {
  if (size < 4 || data[0] != kMarker || data[1] != kStartOfImage) return false;
  size_t at = 2;
  while (at < size) {
    if (data[at] != kMarker) return false;  // bytes between segments
    while (at < size && data[at] == kMarker) ++at;  // fill bytes
    if (at >= size) return false;
    const uint8_t code = data[at++];
    if (code == kEndOfImage) return true;
    if (code == kTemporary) continue;
    if (is_restart(code) || code == kStartOfImage || code == kStuffedZero) return false;  // outside a scan
    if (size - at < 2) return false;
    const size_t length = size_t{data[at]} << 8 | data[at + 1];
    if (length < 2 || length > size - at) return false;
    at += length;
    if (code == kStartOfScan) {
      at = end_of_scan(data, size, at);
      if (at >= size) return false;  // cut short: no marker after the scan's data
    }
  }
  return false;
}

}  // namespace ferry::detail
