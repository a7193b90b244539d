#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/build_config.h"
#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/formats/source_registry.h"
#include "ferry/io/transforms/transform_registry.h"
#include "ferry/pipeline/error.h"

#if __has_include(<torch/version.h>)
#include <torch/version.h>
#define FERRY_PLUGIN_TORCH_VERSION TORCH_VERSION
#else
#define FERRY_PLUGIN_TORCH_VERSION FERRY_TORCH_VERSION
#endif

// A plugin: a shared library of the user's own source kinds, decoders and sample transforms, loaded
// into ferry at run time without recompiling it (`plugins:` in a config, `ferry --plugin PATH`,
// ferry::load_plugin(), ferry.load_plugin()). It defines one entry point with FERRY_PLUGIN:
//
//   #include <ferry/assembly/plugin.h>
//
//   FERRY_PLUGIN(registrar) {
//     registrar.add_source_kind(csv_source_kind());
//     registrar.add_decoder(my_decoder_kind());
//     registrar.add_transform(my_transform_kind());
//   }
//
// built as a shared library that links ferry::ferry (find_package(ferry)); examples/plugin/ is one.
// docs/extending.md says how to write each part.

namespace ferry {

/// The version of the plugin interface: what a plugin's entry points are and take. A loader refuses
/// a plugin of another.
inline constexpr uint32_t kPluginInterface = 1;

/// What a plugin was built against, which the loader compares with its own build before it calls any
/// of the plugin's C++ code (plain C data: it crosses first). A plugin must be built against the same
/// ferry and libtorch as the program that loads it: their C++ types cross the boundary.
struct PluginBuild {
  uint32_t interface;         // kPluginInterface
  const char* ferry_version;  // FERRY_VERSION
  const char* torch_version;  // the libtorch headers' version
  int cxx11_abi;              // _GLIBCXX_USE_CXX11_ABI: std::string's layout
};

namespace detail {
inline constexpr PluginBuild kThisBuild{kPluginInterface, FERRY_VERSION, FERRY_PLUGIN_TORCH_VERSION,
                                        _GLIBCXX_USE_CXX11_ABI};
}  // namespace detail

/// What a plugin's entry point registers its extensions with. The loading program implements it: the
/// additions go to its registries (not to a copy of them in the plugin), all of a plugin's at once once
/// its entry point has returned, or none if one cannot be registered. Called on the loading thread.
class PluginRegistrar {
 public:
  virtual void add_source_kind(SourceKind kind) = 0;
  virtual void add_decoder(DecoderKind kind) = 0;
  /// A decoder instance without keys, shared by every field that names it.
  virtual void add_decoder(std::shared_ptr<const Decoder> decoder) = 0;
  virtual void add_transform(TransformKind kind) = 0;
  /// The plugin's file, as given to the loader.
  virtual const std::string& path() const = 0;

 protected:
  ~PluginRegistrar() = default;
};

/// A plugin that cannot be loaded: a missing file, a file that is not a shared library or not a ferry
/// plugin, one built against another ferry or libtorch (both named), one whose entry point throws, or
/// an extension whose name is already registered. Nothing of it is registered. `ferry` exits with 2.
class PluginError : public Error {
 public:
  using Error::Error;
};

/// Loads the plugin at `path` (a relative path is relative to the current folder) and registers its
/// extensions in the process-wide registries (SourceRegistry, DecoderRegistry, TransformRegistry).
/// Loading a plugin that is loaded already does nothing. Throws PluginError. Thread-safe (loads one
/// plugin at a time); a loaded plugin stays loaded for the life of the process.
void load_plugin(const std::string& path);

/// The plugins loaded so far, as absolute paths, in the order they were loaded.
std::vector<std::string> loaded_plugins();

}  // namespace ferry

/// Marks the plugin's entry points for export (whatever the library's default visibility).
#define FERRY_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

/// Defines a plugin's entry point: the function body that follows registers the plugin's extensions
/// with `registrar` (a ferry::PluginRegistrar&). Use it once per plugin.
#define FERRY_PLUGIN(registrar)                                                                                 \
  FERRY_PLUGIN_EXPORT const ::ferry::PluginBuild* ferry_plugin_build() { return &::ferry::detail::kThisBuild; } \
  FERRY_PLUGIN_EXPORT void ferry_plugin_register(::ferry::PluginRegistrar& registrar)
