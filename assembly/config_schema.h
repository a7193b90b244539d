#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ferry {

/// One key a YAML config may set. The list of them (config_keys()) is the schema: the loader
/// accepts exactly these keys (and suggests the nearest for anything else), and docs/config.md
/// documents exactly these (a test compares the two).
///
/// Paths use `[]` for the elements of a list and `<field>` for a key named after a source field:
/// "source.fields[].dtype", "collate.pad_values.<field>".
struct ConfigKey {
  std::string path;
  std::string type;           // "integer", "size", "boolean", "one of: fail, skip", ...
  std::string default_value;  // as a user would write it; "required" for required keys
  std::string description;
  std::string example;  // a valid YAML value for this key
};

/// Every key, in documentation order. Thread-safe (immutable).
const std::vector<ConfigKey>& config_keys();

/// The key with this schema path, or nullptr.
const ConfigKey* find_config_key(std::string_view path);

/// The names directly under a section ("" for the top level, "augment.normalize" for its keys), in
/// schema order.
std::vector<std::string> config_section_keys(std::string_view section);

/// Markdown reference of every registered source kind, decoder and transform with its keys (a plugin's
/// too, once loaded): what `ferry info --keys` prints and docs/config.md holds for the built-in ones.
std::string extension_keys_markdown();

}  // namespace ferry
