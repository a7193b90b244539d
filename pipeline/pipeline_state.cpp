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
        << ", \"position\": " << next->position;
    if (consumed) out << ", \"consumed\": " << *consumed;
    out << "}";
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

std::string states_json(const std::vector<PipelineState>& states) {
  if (states.size() == 1) return states.front().to_json();
  std::string out = "{\n  \"format\": \"ferry-states\",\n  \"version\": 1,\n  \"devices\": [\n";
  for (size_t d = 0; d < states.size(); ++d) {
    std::string state = states[d].to_json();
    while (!state.empty() && state.back() == '\n') state.pop_back();
    // Indented one level, as the list's items.
    out += "  ";
    for (const char c : state) {
      out += c;
      if (c == '\n') out += "  ";
    }
    out += d + 1 < states.size() ? ",\n" : "\n";
  }
  return out + "  ]\n}\n";
}

}  // namespace ferry
