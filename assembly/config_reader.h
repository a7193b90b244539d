#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "ferry/assembly/config_loader.h"

#include "ferry/assembly/config.h"
#include "ferry/assembly/config_error.h"
#include "ferry/io/util/key_schema.h"

// The config loader's one class, over several files by concern: where things are and the load itself
// (config_loader.cpp), --set (config_overrides.cpp), typed values (config_values.cpp), the keys of the
// extensions, source kinds, decoders, transforms and plugins (config_extension_keys.cpp), the sections
// of the standard pipeline (config_sections.cpp), and the checks across sections (config_checks.cpp).
// Internal: not installed (it includes yaml-cpp).

namespace ferry::detail {

/// "a, b, c".
std::string list_text(const std::vector<std::string>& names);
/// " (did you mean 'x'?)" for the nearest candidate within a few edits, else "".
std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates);
/// What a node holds, for "expected X, found Y": "'text'", "a list [0.5, 0.1]", "a mapping {a: 1}",
/// "nothing"; long lists, mappings and scalars shortened.
std::string found_text(const YAML::Node& node);

/// Reads YAML text into a Config, collecting problems instead of stopping at the first. One per load;
/// not thread-safe (it need not be).
class ConfigReader {
 public:
  ConfigReader(std::string origin, const std::vector<std::string>& overrides, OverrideOrigin overrides_origin);
  /// Throws ConfigError listing every problem found.
  Config load(std::string_view text);

 private:
  using Node = YAML::Node;

  // ---- where things are (config_loader.cpp) ----
  std::string position(const YAML::Mark& mark) const;
  /// An overridden key (or one inside an overridden section) is located at its --set.
  std::string location(const std::string& key, const Node& node) const;
  /// Whether `key` (or a section holding it) was set by an override.
  bool overridden(const std::string& key) const;
  /// Where the override that set `key` (or a section holding it) was given; nullptr when none did.
  const std::string* override_of(const std::string& key) const;
  void problem(const std::string& key, const Node& node, std::string message);
  void expected(const std::string& key, const Node& node, const std::string& what);
  /// Records where `key` was set and, for a scalar, its text (Config::locations, Config::values).
  void note(const std::string& key, const Node& node);
  /// A problem found after reading, about keys read before: located where `key` was set.
  void problem_at(const std::string& key, std::string message);
  /// An extension's problems, at their values' places.
  void add(const KeyProblems& problems);

  // ---- --set key.path=value (config_overrides.cpp) ----
  void apply_overrides(Node& root);
  static std::optional<std::vector<std::string>> key_path(const std::string& path, std::string& why);
  void set_path(Node& root, const std::vector<std::string>& parts, const Node& value, const std::string& where);

  // ---- typed values (config_values.cpp) ----
  /// Checks that `node` is a mapping whose keys all belong to `section` of the schema (config_keys()),
  /// reporting unknown keys with the nearest known one, and keys given twice. False if not a mapping.
  bool mapping(const Node& node, const std::string& key, std::string_view section);
  /// Reports keys given twice in a mapping whose keys are not the schema's (field names).
  void check_unique_keys(const Node& map, const std::string& key);
  /// Whether `name` (at `name_node`, the key path `path`) was given before in the mapping whose names
  /// `seen` records; reports it if so.
  bool given_twice(std::map<std::string, YAML::Mark>& seen, const std::string& name, const Node& name_node,
                   const std::string& path);
  static std::optional<Node> child(const Node& map, std::string_view name);
  static bool is_auto(const Node& node);
  std::optional<std::string> scalar(const Node& node, const std::string& key, const std::string& what);
  std::optional<uint64_t> integer(const Node& node, const std::string& key, uint64_t min, uint64_t max,
                                  const std::string& what);
  std::optional<double> number(const Node& node, const std::string& key);
  std::optional<bool> boolean(const Node& node, const std::string& key);
  std::optional<std::string> choice(const Node& node, const std::string& key, const std::vector<std::string>& choices);
  std::optional<uint64_t> size(const Node& node, const std::string& key, uint64_t min, const std::string& what);
  /// A [first, second] pair of numbers.
  std::optional<std::pair<double, double>> pair(const Node& node, const std::string& key, const std::string& what);
  /// A [min, max] pair with 0 < min <= max (<= `most`, when given).
  std::optional<std::pair<double, double>> positive_range(const Node& node, const std::string& key,
                                                          std::optional<double> most);
  /// Three numbers, one per channel.
  std::optional<std::array<double, 3>> triple(const Node& node, const std::string& key, bool positive);
  /// A registered decoder's name, or nullopt after reporting a problem.
  std::optional<std::string> decoder_name(const Node& node, const std::string& key);

  // ---- the keys of extensions (config_extension_keys.cpp) ----
  /// `node` read as `spec` says, as a KeyValue; nullopt after reporting why it cannot be.
  std::optional<KeyValue> read_keyed(const Node& node, const std::string& key, const KeySpec& spec);
  /// `node` as it is written (KeySpec::Type::kAny): scalars as their text, null as "null".
  KeyValue read_any(const Node& node, const std::string& key);
  /// A mapping of `keys` (and, where one of them names a decoder, that decoder's keys too). `extra`
  /// names keys read elsewhere (a source's `kind`); `foreign(name)` may say why a key that is not one of
  /// them is out of place ("not a key of source kind 'tar' ..."). Runs the decoder's check. nullopt when
  /// a key could not be read.
  std::optional<KeyValue> read_keyed_mapping(
      const Node& node, const std::string& key, const std::vector<KeySpec>& keys,
      const std::vector<std::string>& extra = {},
      const std::function<std::optional<std::string>(const std::string& name)>& foreign = {});
  std::optional<KeyValue> read_integer(const Node& node, const std::string& key, const KeySpec& spec);
  void read_plugins(const Node& node);
  void read_source(const Node& node);
  /// A source mapping at `key` (`source`, or a mixture's part): its kind (named, or the one kind whose
  /// required key it holds) and that kind's keys, checked as the kind checks them. Returns the keys with
  /// `kind` among them; nullopt after adding problems.
  std::optional<KeyValue> read_source_mapping(const Node& node, const std::string& key);
  void read_transforms(const Node& node);

  // ---- sections (config_sections.cpp) ----
  void read_root(const Node& root);
  void read_sampler(const Node& node);
  void read_decode(const Node& node);
  void read_collate(const Node& node);
  void read_pool(const Node& node);
  void read_cache(const Node& node);
  void read_augment(const Node& node);
  void read_devices(const Node& transfer, const Node& value);
  void read_transfer(const Node& node);
  void read_stats(const Node& node);
  /// A file the run writes (stats.report, stats.trace): its path, or nullopt after a problem (its folder
  /// missing or not writable, a folder in its place) or a null value.
  std::optional<std::string> output_path(const Node& node, const std::string& key);
  void read_remote(const Node& node);
  /// A duration key of at least `min_ms`, or nullopt after a problem.
  std::optional<std::chrono::milliseconds> duration(const Node& node, const std::string& key, int64_t min_ms);

  // ---- checks across sections (config_checks.cpp) ----
  void check_combinations();

  std::string origin_;
  const std::vector<std::string>& overrides_;
  OverrideOrigin overrides_origin_;
  std::map<std::string, std::string> overridden_;         // key path -> "--set ...", where it was overridden
  std::vector<std::pair<std::string, Node>> field_keys_;  // keys named after a field, to check later
  // The first ConfigError::kMaxListed problems, and how many more: a file of a million unknown keys
  // costs a count, not a million messages.
  struct Problems {
    std::vector<ConfigProblem> listed;
    size_t more = 0;
    void push_back(ConfigProblem problem) {
      if (listed.size() < ConfigError::kMaxListed) {
        listed.push_back(std::move(problem));
      } else {
        ++more;
      }
    }
    bool empty() const noexcept { return listed.empty(); }
  };
  Problems problems_;
  Config config_;
  bool source_read_ = false;  // the source's keys were all read (its kind's checks ran)
};

}  // namespace ferry::detail
