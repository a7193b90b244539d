#pragma once

#include <cstddef>
#include <string_view>

namespace ferry::detail {

/// Length of the well-formed UTF-8 sequence at the start of `text` (1 for an ASCII byte), or 0 when it is
/// not one: a stray continuation byte, a truncated sequence, an overlong form, a surrogate or a code point
/// past U+10FFFF. For writers of JSON, whose strings must be UTF-8 while paths and keys need not be. Pure.
size_t utf8_sequence_length(std::string_view text) noexcept;

}  // namespace ferry::detail
