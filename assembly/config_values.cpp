// Typed values of the standard pipeline's sections: each reader reports what it expected and found,
// at the key's place, and records the key's place and value (Config::locations, Config::values).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <sstream>

#include "ferry/assembly/config_reader.h"
#include "ferry/assembly/config_schema.h"
#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/util/printable.h"
#include "ferry/io/util/units.h"

namespace ferry::detail {
namespace {

std::string join_path(const std::string& parent, std::string_view name) {
  return parent.empty() ? std::string(name) : parent + "." + std::string(name);
}

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

// Checks that `node` is a mapping whose keys all belong to `section` of the schema (reporting
// unknown keys with the nearest known one, and keys given twice). False if it is not a mapping.
bool ConfigReader::mapping(const Node& node, const std::string& key, std::string_view section) {
  if (!node.IsMap()) {
    expected(key, node, "a mapping of keys (" + list_text(config_section_keys(section)) + ")");
    return false;
  }
  const std::vector<std::string> known = config_section_keys(section);
  std::map<std::string, YAML::Mark> seen;
  for (const auto& entry : node) {
    const Node& name_node = entry.first;
    const std::string name = name_node.IsScalar() ? name_node.Scalar() : found_text(name_node);
    const std::string path = join_path(key, name);
    if (given_twice(seen, name, name_node, path)) continue;
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      const std::string where_known = section.empty() ? "at the top level" : "in " + key;
      problems_.push_back(
          {location(path, name_node), path,
           "unknown key" + did_you_mean(name, known) + "; known " + where_known + ": " + list_text(known)});
    }
  }
  note(key, node);
  return true;
}

bool ConfigReader::given_twice(std::map<std::string, YAML::Mark>& seen, const std::string& name, const Node& name_node,
                               const std::string& path) {
  const auto [it, inserted] = seen.emplace(name, name_node.Mark());
  if (inserted) return false;
  problems_.push_back(
      {location(path, name_node), path, "given twice (first at line " + std::to_string(it->second.line + 1) + ")"});
  return true;
}

// Reports keys given twice in a mapping whose keys are not the schema's (field names).
void ConfigReader::check_unique_keys(const Node& map, const std::string& key) {
  std::map<std::string, YAML::Mark> seen;
  for (const auto& entry : map) {
    const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : found_text(entry.first);
    (void)given_twice(seen, name, entry.first, join_path(key, name));
  }
}

// The node under `name`, if the mapping has it.
std::optional<YAML::Node> ConfigReader::child(const Node& map, std::string_view name) {
  if (!map.IsMap()) return std::nullopt;
  Node value = map[std::string(name)];
  if (!value.IsDefined()) return std::nullopt;
  return value;
}

std::optional<std::string> ConfigReader::scalar(const Node& node, const std::string& key, const std::string& what) {
  if (!node.IsScalar()) {
    expected(key, node, what);
    return std::nullopt;
  }
  note(key, node);
  return node.Scalar();
}

bool ConfigReader::is_auto(const Node& node) { return node.IsScalar() && node.Scalar() == "auto"; }

std::optional<uint64_t> ConfigReader::integer(const Node& node, const std::string& key, uint64_t min, uint64_t max,
                                              const std::string& what) {
  const auto text = scalar(node, key, what);
  if (!text) return std::nullopt;
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (error != std::errc() || end != text->data() + text->size() || value < min || value > max) {
    expected(key, node, what);
    return std::nullopt;
  }
  return value;
}

std::optional<double> ConfigReader::number(const Node& node, const std::string& key) {
  const auto text = scalar(node, key, "a number");
  if (!text) return std::nullopt;
  std::string_view digits = *text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  double value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || !std::isfinite(value)) {
    expected(key, node, "a finite number");
    return std::nullopt;
  }
  return value;
}

std::optional<bool> ConfigReader::boolean(const Node& node, const std::string& key) {
  const auto text = scalar(node, key, "true or false");
  if (!text) return std::nullopt;
  if (*text == "true" || *text == "yes" || *text == "on") return true;
  if (*text == "false" || *text == "no" || *text == "off") return false;
  expected(key, node, "true or false");
  return std::nullopt;
}

std::optional<std::string> ConfigReader::choice(const Node& node, const std::string& key,
                                                const std::vector<std::string>& choices) {
  const std::string what = "one of " + list_text(choices);
  const auto text = scalar(node, key, what);
  if (!text) return std::nullopt;
  if (std::find(choices.begin(), choices.end(), *text) != choices.end()) return text;
  problem(key, node, "expected " + what + ", found '" + *text + "'" + did_you_mean(*text, choices));
  return std::nullopt;
}

std::optional<uint64_t> ConfigReader::size(const Node& node, const std::string& key, uint64_t min,
                                           const std::string& what) {
  const auto text = scalar(node, key, what);
  if (!text) return std::nullopt;
  const auto bytes = parse_byte_size(*text);
  if (!bytes) {
    problem(key, node, "expected " + what + ", found '" + printable(*text, 80) + "': " + byte_size_problem(*text));
    return std::nullopt;
  }
  if (*bytes < min) {
    problem(key, node,
            "expected " + what + ", found '" + printable(*text, 80) + "': less than the smallest, " +
                format_byte_size(min));
    return std::nullopt;
  }
  return bytes;
}

// A [first, second] pair of numbers.
std::optional<std::pair<double, double>> ConfigReader::pair(const Node& node, const std::string& key,
                                                            const std::string& what) {
  if (!node.IsSequence() || node.size() != 2) {
    expected(key, node, what);
    return std::nullopt;
  }
  note(key, node);
  const auto first = number(node[0], key + "[0]");
  const auto second = number(node[1], key + "[1]");
  if (!first || !second) return std::nullopt;
  return std::pair{*first, *second};
}

// A registered decoder's name, or nullopt after reporting a problem.
std::optional<std::string> ConfigReader::decoder_name(const Node& node, const std::string& key) {
  const std::vector<std::string> registered = DecoderRegistry::global().names();
  auto text = scalar(node, key, "a decoder name (" + list_text(registered) + ")");
  if (!text) return std::nullopt;
  if (std::find(registered.begin(), registered.end(), *text) == registered.end()) {
    problem(
        key, node,
        "unknown decoder '" + *text + "'" + did_you_mean(*text, registered) + "; registered: " + list_text(registered));
    return std::nullopt;
  }
  return text;
}

// A [min, max] pair with 0 < min <= max (<= `most`, when given).
std::optional<std::pair<double, double>> ConfigReader::positive_range(const Node& node, const std::string& key,
                                                                      std::optional<double> most) {
  const std::string what = "[min, max] with 0 < min <= max" + (most ? " <= " + number_text(*most) : std::string());
  auto range = pair(node, key, what);
  if (range && !(range->first > 0 && range->first <= range->second && (!most || range->second <= *most))) {
    expected(key, node, what);
    return std::nullopt;
  }
  return range;
}

// Three numbers, one per channel.
std::optional<std::array<double, 3>> ConfigReader::triple(const Node& node, const std::string& key, bool positive) {
  const std::string what = positive ? "a list of 3 numbers > 0 (R, G, B)" : "a list of 3 numbers (R, G, B)";
  if (!node.IsSequence() || node.size() != 3) {
    expected(key, node, what);
    return std::nullopt;
  }
  note(key, node);
  std::array<double, 3> values{};
  for (size_t c = 0; c < 3; ++c) {
    const auto value = number(node[c], key + "[" + std::to_string(c) + "]");
    if (!value) return std::nullopt;
    if (positive && *value <= 0) {
      expected(key + "[" + std::to_string(c) + "]", node[c], "a number > 0");
      return std::nullopt;
    }
    values[c] = *value;
  }
  return values;
}

}  // namespace ferry::detail
