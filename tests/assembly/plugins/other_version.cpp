// A plugin as another ferry would build it: its entry points say so, and the loader must not call its
// registration.
#include <ferry/assembly/plugin.h>

namespace {
constexpr ferry::PluginBuild kOtherBuild{ferry::kPluginInterface, "0.0.9", "2.1.0", 1};
}  // namespace

FERRY_PLUGIN_EXPORT const ferry::PluginBuild* ferry_plugin_build() { return &kOtherBuild; }
FERRY_PLUGIN_EXPORT void ferry_plugin_register(ferry::PluginRegistrar&) {
  throw ferry::Error("the registration of a plugin built against another ferry was called");
}
