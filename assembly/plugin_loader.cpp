#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>

#include <dlfcn.h>
#include <sys/stat.h>

#include "ferry/assembly/plugin.h"
#include "ferry/io/util/dataset_paths.h"

namespace ferry {
namespace {

// Note [loading a plugin]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A plugin is built against ferry's headers and links its own copy of what it uses of ferry's static
// libraries; so its registries, if it called SourceRegistry::global(), would be its own and empty to the
// program. Its entry point therefore gets a PluginRegistrar from the program, whose calls land in the
// program's registries. Its C++ types (SourceKind, a std::function, a Source's vtable) cross the
// boundary as they are, which is sound only between the same ferry, the same libtorch and the same
// std::string layout: ferry_plugin_build() says what the plugin was built against, in plain C data,
// before any of its C++ is called. Everything a plugin registers is checked first and added at once,
// or nothing is (a name already taken refuses the whole plugin), so a refused plugin leaves the
// registries as they were and its library is closed. A loaded one is never closed: the registries hold
// its code (functions, vtables) for the life of the process.

std::mutex g_mutex;
std::vector<std::string> g_loaded;  // guarded by g_mutex

// The additions a plugin's entry point makes, held until it has returned.
class StagedRegistrar final : public PluginRegistrar {
 public:
  explicit StagedRegistrar(std::string path) : path_(std::move(path)) {}
  void add_source_kind(SourceKind kind) override { sources.push_back(std::move(kind)); }
  void add_decoder(DecoderKind kind) override { decoders.push_back(std::move(kind)); }
  void add_decoder(std::shared_ptr<const Decoder> decoder) override {
    decoders.push_back(DecoderRegistry::kind_of(std::move(decoder)));
  }
  void add_transform(TransformKind kind) override { transforms.push_back(std::move(kind)); }
  const std::string& path() const override { return path_; }

  std::vector<SourceKind> sources;
  std::vector<DecoderKind> decoders;
  std::vector<TransformKind> transforms;

 private:
  std::string path_;
};

// Throws PluginError for an extension its registry would refuse (a name registered already, a key it
// cannot declare) or that the plugin registers twice; before anything is added.
template <typename Kind, typename Registry>
void check_names(const std::vector<Kind>& kinds, const Registry& registry, const std::string& what,
                 const std::string& plugin) {
  std::set<std::string> seen;
  for (const Kind& kind : kinds) {
    if (const std::optional<std::string> why = registry.refusal(kind))
      throw PluginError("plugin " + plugin + ": " + *why);
    if (!seen.insert(kind.name).second) {
      throw PluginError("plugin " + plugin + " registers the " + what + " '" + kind.name + "' twice");
    }
  }
}

std::string build_text(const char* ferry_version, const char* torch_version, int cxx11_abi) {
  return "ferry " + std::string(ferry_version) + " (libtorch " + torch_version +
         (cxx11_abi ? "" : ", the pre-C++11 std::string") + ")";
}

// The library's handle, closed unless released: a plugin refused after dlopen leaves nothing behind.
struct Library {
  void* handle = nullptr;
  ~Library() {
    if (handle != nullptr) ::dlclose(handle);
  }
  void* release() { return std::exchange(handle, nullptr); }
};

}  // namespace

void load_plugin(const std::string& path) {
  const std::string shown = "'" + path + "'";
  struct stat info {};
  if (path.empty()) throw PluginError("a plugin's path is empty");
  if (::stat(path.c_str(), &info) != 0) {
    throw PluginError("plugin " + shown + ": " + detail::missing_text(path) + " (" + std::strerror(errno) + ")");
  }
  if (!S_ISREG(info.st_mode)) throw PluginError("plugin " + shown + " is not a file (a shared library, .so)");
  // Absolute: dlopen() would look a name without a '/' up in the library path instead.
  const std::string absolute = detail::real_path(path);

  std::lock_guard lock(g_mutex);
  for (const std::string& loaded : g_loaded) {
    if (loaded == absolute) return;
  }
  Library library;
  library.handle = ::dlopen(absolute.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library.handle == nullptr) {
    const char* why = ::dlerror();
    throw PluginError("plugin " + shown +
                      " cannot be loaded as a shared library: " + (why != nullptr ? why : "dlopen failed"));
  }
  using BuildEntry = const PluginBuild* (*)();
  using RegisterEntry = void (*)(PluginRegistrar&);
  const auto build = reinterpret_cast<BuildEntry>(::dlsym(library.handle, "ferry_plugin_build"));
  const auto entry = reinterpret_cast<RegisterEntry>(::dlsym(library.handle, "ferry_plugin_register"));
  if (build == nullptr || entry == nullptr) {
    throw PluginError("plugin " + shown +
                      " is not a ferry plugin: it has no ferry_plugin_build and ferry_plugin_register entry points "
                      "(define them with FERRY_PLUGIN, <ferry/assembly/plugin.h>)");
  }
  const PluginBuild* built = build();
  const PluginBuild& here = detail::kThisBuild;
  if (built == nullptr || built->interface != here.interface) {
    throw PluginError("plugin " + shown + " uses plugin interface " +
                      (built != nullptr ? std::to_string(built->interface) : std::string("(none)")) + ", this ferry " +
                      std::to_string(here.interface) + ": rebuild it against this ferry");
  }
  const std::string theirs = build_text(built->ferry_version, built->torch_version, built->cxx11_abi);
  const std::string ours = build_text(here.ferry_version, here.torch_version, here.cxx11_abi);
  if (theirs != ours) {
    throw PluginError("plugin " + shown + " was built against " + theirs + ", but this is " + ours +
                      ": rebuild it against this ferry (find_package(ferry) from where this one is installed)");
  }

  // Its C++ runs from here: what it registers is held until all of it is known to fit (Note [loading a
  // plugin]).
  {
    StagedRegistrar staged(path);
    try {
      entry(staged);
    } catch (const std::exception& e) {
      throw PluginError("plugin " + shown + " failed while registering its extensions: " + cause_of(e));
    } catch (...) {
      throw PluginError("plugin " + shown + " failed while registering its extensions (a non-standard exception)");
    }
    check_names(staged.sources, SourceRegistry::global(), "source kind", shown);
    check_names(staged.decoders, DecoderRegistry::global(), "decoder", shown);
    check_names(staged.transforms, TransformRegistry::global(), "transform", shown);
    for (SourceKind& kind : staged.sources) {
      kind.origin = absolute;
      SourceRegistry::global().add(std::move(kind));
    }
    for (DecoderKind& kind : staged.decoders) {
      kind.origin = absolute;
      DecoderRegistry::global().add(std::move(kind));
    }
    for (TransformKind& kind : staged.transforms) {
      kind.origin = absolute;
      TransformRegistry::global().add(std::move(kind));
    }
  }
  library.release();
  g_loaded.push_back(absolute);
}

std::vector<std::string> loaded_plugins() {
  std::lock_guard lock(g_mutex);
  return g_loaded;
}

}  // namespace ferry
