#include "ferry/io/util/printable.h"

namespace ferry {

std::string printable(std::string_view text, size_t max_bytes, std::string_view also_escaped) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && also_escaped.find(static_cast<char>(c)) == std::string_view::npos) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

}  // namespace ferry
