#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

// Read-only memory mappings of whole data files. Internal: not installed.

namespace ferry::detail {

/// How a mapping will be read, for the kernel's read-ahead (madvise).
enum class MappedAccess { kSequential, kRandom };

/// Maps the regular file `path` read-only, whole, and sets `bytes` to its size (null for an empty
/// file). The descriptor is closed once mapped; the mapping lives as long as a copy of the pointer.
/// Throws ferry::Error starting with `what` ("tokens source") for a file that cannot be opened (a FIFO
/// is refused, not waited on), is not a regular file, or cannot be mapped.
std::shared_ptr<const std::byte> map_file(const std::string& path, std::string_view what, MappedAccess access,
                                          size_t& bytes);

}  // namespace ferry::detail
