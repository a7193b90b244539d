#include "ferry/pipeline/utf8.h"

#include <cstdint>
#include <string>

namespace ferry::detail {

size_t utf8_sequence_length(std::string_view text) noexcept {
  if (text.empty()) return 0;
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  size_t length = 0;
  uint32_t code = 0;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code = lead & 0x0Fu;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code = lead & 0x07u;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0u) != 0x80u) return 0;
    code = (code << 6) | (byte(i) & 0x3Fu);
  }
  if ((length == 3 && code < 0x800) || (length == 4 && code < 0x10000) || code > 0x10FFFF ||
      (code >= 0xD800 && code <= 0xDFFF)) {
    return 0;
  }
  return length;
}

void append_json_escaped(std::string& out, std::string_view text, InvalidUtf8 invalid) {
  // `prefix` (\u and two hex digits), then the byte's two.
  const auto escape = [&out](const char* prefix, unsigned char byte) {
    static constexpr char kHex[] = "0123456789abcdef";
    out += prefix;
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xFu]);
  };
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '"' || byte == '\\') {
      out.push_back('\\');
      out.push_back(text[i++]);
    } else if (byte < 0x20) {
      escape("\\u00", byte);
      ++i;
    } else if (byte < 0x80) {
      out.push_back(text[i++]);
    } else if (const size_t length = utf8_sequence_length(text.substr(i)); length != 0) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      switch (invalid) {
        case InvalidUtf8::kReplacement: out += "\\ufffd"; break;
        case InvalidUtf8::kLatin1: escape("\\u00", byte); break;
        case InvalidUtf8::kSurrogateEscape: escape("\\udc", byte); break;
      }
      ++i;
    }
  }
}

}  // namespace ferry::detail
