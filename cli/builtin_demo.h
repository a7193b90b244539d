#pragma once

#include <string_view>

namespace ferry::cli {

/// The text of configs/demo.yaml as it was at build time: what `ferry run` runs without a config.
std::string_view builtin_demo_yaml();

/// How messages name it.
inline constexpr const char* kBuiltinDemoName = "<built-in configs/demo.yaml>";

}  // namespace ferry::cli
