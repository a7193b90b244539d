#pragma once

#include <cstddef>
#include <string>

namespace ferry {

/// The whole of a small text file that a person wrote or ferry saved (a config, a saved state), or a
/// ConfigError naming `path`: a directory, a file that cannot be opened or read, or one of more than
/// `max_bytes` (read no further, so `/dev/zero` or a dataset passed by mistake cannot exhaust memory).
/// `what` names the kind of file in the messages ("config file").
std::string read_text_file(const std::string& path, size_t max_bytes, const std::string& what);

}  // namespace ferry
