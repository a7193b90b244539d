#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ferry/assembly/config.h"
#include "ferry/assembly/config_error.h"

namespace ferry {

/// Reads a YAML config file (docs/config.md) into a Config, applying `overrides` ("key.path=value",
/// as `ferry run --set` takes them) on top. Throws ConfigError listing every problem found, each
/// with file:line:column, the key and what was expected and found: malformed YAML, unknown keys
/// (with the nearest known one), wrong types, values out of range, missing required keys and
/// combinations that cannot work. Starts no thread; reads only the file.
///
/// What needs the machine or the source's data (is the device there, does the largest batch fit in
/// a slab) is checked by check_config() (configured_pipeline.h), which make_pipeline(const Config&) calls.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// The same for YAML text; `origin` names it in messages ("configs/demo.yaml", "<built-in demo>").
Config parse_config(std::string_view yaml, const std::string& origin, const std::vector<std::string>& overrides = {});

/// Where the overrides come from, as messages name them: `--set decode.threads=8` for the command line's,
/// `overrides['decode.threads']` for a program's (ferry.Pipeline(overrides={...}) in Python).
enum class OverrideOrigin { kCommandLine, kProgram };

/// load_config() and parse_config() with overrides named as `origin` says.
Config load_config(const std::string& path, const std::vector<std::string>& overrides, OverrideOrigin origin);
Config parse_config(std::string_view yaml, const std::string& origin, const std::vector<std::string>& overrides,
                    OverrideOrigin overrides_origin);

}  // namespace ferry
