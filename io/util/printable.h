#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ferry {

/// Bytes from a file, safe to put in an error message: printable ASCII is kept; control bytes,
/// non-ASCII bytes, the backslash and every character of `also_escaped` (the message's quote) become
/// \xNN; text longer than `max_bytes` is cut there and ends in "...".
std::string printable(std::string_view text, size_t max_bytes, std::string_view also_escaped = "'");

}  // namespace ferry
