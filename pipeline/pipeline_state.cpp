#include "ferry/pipeline/pipeline_state.h"

#include <sstream>

namespace ferry {
namespace {

// JSON string literal; order values are config text (names, numbers, dtype lists).
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      static const char* kHex = "0123456789abcdef";
      out += "\\u00";
      out += kHex[(c >> 4) & 0xf];
      out += kHex[c & 0xf];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string PipelineState::to_json() const {
  std::ostringstream out;
  out << "{\n  \"format\": \"ferry-state\",\n  \"version\": 1,\n  \"next_batch\": " << next_batch;
  if (next) {
    out << ",\n  \"next\": {\"epoch\": " << next->epoch << ", \"batch\": " << next->index
        << ", \"position\": " << next->position << "}";
  }
  if (last_epoch && last_index)
    out << ",\n  \"last_delivered\": {\"epoch\": " << *last_epoch << ", \"batch\": " << *last_index << "}";
  out << ",\n  \"order\": {";
  const char* separator = "\n";
  for (const auto& [key, value] : order) {
    out << separator << "    " << quoted(key) << ": " << quoted(value);
    separator = ",\n";
  }
  out << (order.empty() ? "}" : "\n  }") << "\n}\n";
  return out.str();
}

}  // namespace ferry
