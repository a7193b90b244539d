#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ferry::detail {

/// Length of the well-formed UTF-8 sequence at the start of `text` (1 for an ASCII byte), or 0 when it is
/// not one: a stray continuation byte, a truncated sequence, an overlong form, a surrogate or a code point
/// past U+10FFFF. For writers of JSON, whose strings must be UTF-8 while paths and keys need not be. Pure.
size_t utf8_sequence_length(std::string_view text) noexcept;

/// What a JSON writer puts in place of a byte that is not part of well-formed UTF-8. Each reader wants
/// its own: a person reading a report, a viewer showing a file name, Python code opening that file.
enum class InvalidUtf8 {
  kReplacement,      // U+FFFD, one per byte, as decoders commonly do
  kLatin1,           // \u00XX, the code point of the byte's value: a Latin-1 file name reads as written
  kSurrogateEscape,  // \udcXX, Python's surrogateescape: os.fsencode() gives the byte back
};

/// Appends `text` as the inside of a JSON string, without its quotes: quote and backslash escaped,
/// control characters as \u00XX, well-formed UTF-8 as it is, any other byte as `invalid` says, so that
/// the result is valid JSON whatever the bytes. Pure.
void append_json_escaped(std::string& out, std::string_view text, InvalidUtf8 invalid);

}  // namespace ferry::detail
