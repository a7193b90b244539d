#pragma once

#include <cstddef>
#include <string_view>

// The constants of numpy's .npy format (numpy/lib/format.py) that its decoder (npy_decoder.cpp) and
// its encoder (npy_encoder.cpp) share. Internal: not installed.
//
// A file is the magic "\x93NUMPY", a version (major, minor byte), the header's length (little-endian:
// uint16 in version 1.0, uint32 in 2.0 and 3.0), the header (a Python dict literal padded with spaces
// and a newline) and the data.

namespace ferry::detail::npy {

inline constexpr std::string_view kMagic{"\x93NUMPY", 6};
/// numpy.save pads the header so that the data starts at a multiple of this.
inline constexpr size_t kAlignment = 64;
/// The magic, the version and a version 1.0 header's length: what precedes the header in files the
/// encoder writes.
inline constexpr size_t kPreambleBytes = kMagic.size() + 2 + 2;

}  // namespace ferry::detail::npy
