#include "ferry/assembly/pipeline_state_loader.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace ferry {
namespace {

std::string at(const std::string& origin, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null() || mark.line < 0) return origin;
  return origin + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// Nullopt for a missing key too: a key looked up in a const mapping that lacks it is an invalid
// node, which throws YAML::InvalidNode from every question but IsDefined().
std::optional<uint64_t> whole_number(const YAML::Node& node) {
  if (!node.IsDefined() || !node.IsScalar()) return std::nullopt;
  const std::string& text = node.Scalar();
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

PipelineState parse_pipeline_state(std::string_view text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));  // JSON is YAML
  } catch (const YAML::Exception& e) {
    const std::string where =
        e.mark.is_null() ? origin
                         : origin + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    throw ConfigError({{where, "", "not a saved pipeline state: " + e.msg}});
  }
  std::vector<ConfigProblem> problems;
  if (!root.IsMap() || !root["format"] || !root["format"].IsScalar() || root["format"].Scalar() != "ferry-state") {
    throw ConfigError(
        {{at(origin, root), "format", "not a saved pipeline state (expected \"format\": \"ferry-state\")"}});
  }
  PipelineState state;
  if (const auto version = whole_number(root["version"]); !version || *version != 1) {
    problems.push_back({at(origin, root["version"]), "version", "expected 1 (this ferry's state format)"});
  }
  if (const auto next = whole_number(root["next_batch"])) {
    state.next_batch = *next;
  } else {
    problems.push_back({at(origin, root["next_batch"].IsDefined() ? root["next_batch"] : root), "next_batch",
                        "expected a whole number of batches"});
  }
  if (const YAML::Node next = root["next"]; next.IsDefined()) {
    const auto epoch = next.IsMap() ? whole_number(next["epoch"]) : std::nullopt;
    const auto batch = next.IsMap() ? whole_number(next["batch"]) : std::nullopt;
    const auto position = next.IsMap() ? whole_number(next["position"]) : std::nullopt;
    if (epoch && batch && position) {
      state.next = BatchCursor{*epoch, *batch, *position};
    } else {
      problems.push_back(
          {at(origin, next), "next", "expected {\"epoch\": N, \"batch\": N, \"position\": N} (whole numbers)"});
    }
  }
  if (const YAML::Node last = root["last_delivered"]; last.IsMap()) {
    state.last_epoch = whole_number(last["epoch"]);
    state.last_index = whole_number(last["batch"]);
  }
  const YAML::Node order = root["order"];
  if (!order.IsMap()) {
    problems.push_back({at(origin, order.IsDefined() ? order : root), "order", "expected a mapping of key to value"});
  } else {
    for (const auto& entry : order) {
      if (!entry.first.IsScalar() || !entry.second.IsScalar()) {
        problems.push_back({at(origin, entry.first), "order", "expected text keys and values"});
        continue;
      }
      state.order[entry.first.Scalar()] = entry.second.Scalar();
    }
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));
  return state;
}

PipelineState load_pipeline_state(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw ConfigError({{path, "", "cannot open the saved state: " + std::string(std::strerror(errno))}});
  std::ostringstream text;
  text << file.rdbuf();
  return parse_pipeline_state(text.str(), path);
}

}  // namespace ferry
