#include "ferry/io/decoders/sentencepiece_model.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "ferry/io/util/dataset_paths.h"
#include "ferry/pipeline/error.h"

// Note [sentencepiece module]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Debian's libsentencepiece (0.1.97) is built with its own copy of protobuf-lite and exports its
// symbols; Debian's libtorch loads libprotobuf.so.32. A program linking both gets one protobuf's
// symbols bound to the other's code and crashes in static initialisation, before main. So ferry does
// not link sentencepiece: a small module, libferry_sentencepiece.so (sentencepiece_module.cpp), links
// it and offers a C interface, and the first model loaded opens that module with RTLD_LOCAL, which
// keeps its symbols out of everyone else's lookups. Where a protobuf is already in the process's
// global scope (a program linking libtorch, Debian's or pip's: both export one), the module is opened
// with RTLD_DEEPBIND too, which binds it and libsentencepiece to their own symbols first. DEEPBIND is
// not used otherwise (Python loads torch and ferry's extension RTLD_LOCAL): it also binds the module's
// direct malloc calls to glibc's where the program's is another (jemalloc), which a program on Ubuntu
// 24.04 was once seen to crash in; and the sanitizers' runtimes refuse it, so a sanitizer build has
// sentencepiece only where no protobuf is global. The module is looked for, in order: $FERRY_SENTENCEPIECE_MODULE;
// beside the binary holding ferry's code (the Python package's folder); for a program of the build tree, where the
// build made it; lib/ferry/ beside the program's bin/ (an installed tree, wherever it went); where `cmake
// --install` and the .deb put it; where the build made it.

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FERRY_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define FERRY_SANITIZED 1
#endif
#endif

namespace ferry {
namespace {

constexpr const char* kModuleName = "libferry_sentencepiece.so";
#ifdef FERRY_SANITIZED
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#ifdef FERRY_SENTENCEPIECE_MODULE_BUILT
constexpr bool kModuleBuilt = true;
#else
constexpr bool kModuleBuilt = false;
#endif

struct Module {
  FerrySentencePieceLoad load = nullptr;
  FerrySentencePieceFree free = nullptr;
  FerrySentencePieceEncode encode = nullptr;
  std::string error;  // why there is none, when load is null
};

bool is_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// The folder of `path`, with its trailing '/'.
std::string folder_of(const std::string& path) { return path.substr(0, path.rfind('/') + 1); }

std::vector<std::string> module_candidates() {
  std::vector<std::string> candidates;
  if (const char* chosen = std::getenv("FERRY_SENTENCEPIECE_MODULE"); chosen != nullptr && *chosen != '\0') {
    candidates.emplace_back(chosen);
  }
  // Beside the shared object holding this code (the Python package's extension); dladdr names a
  // program only as it was started, so the program is found through /proc/self/exe.
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&module_candidates), &info) != 0 && info.dli_fname != nullptr) {
    candidates.push_back(folder_of(detail::absolute_path(info.dli_fname)) + kModuleName);
  }
  char program[4096];
  const ssize_t length = ::readlink("/proc/self/exe", program, sizeof(program) - 1);
  const std::string program_folder = length > 0 ? folder_of(std::string(program, static_cast<size_t>(length))) : "";
#ifdef FERRY_SENTENCEPIECE_MODULE_BUILT
  // A program of the build tree loads the module built with it, not an older installed one.
  if (!program_folder.empty() && program_folder.starts_with(FERRY_SENTENCEPIECE_BUILD_DIR "/")) {
    candidates.emplace_back(FERRY_SENTENCEPIECE_MODULE_BUILT);
  }
#endif
#ifdef FERRY_SENTENCEPIECE_MODULE_RELATIVE
  // An installed program, wherever the tree was installed to (--prefix, DESTDIR, the .deb): bin/../lib/ferry.
  if (!program_folder.empty()) candidates.push_back(program_folder + "../" FERRY_SENTENCEPIECE_MODULE_RELATIVE);
  candidates.emplace_back(FERRY_SENTENCEPIECE_MODULE_INSTALLED);
  candidates.emplace_back("/usr/" FERRY_SENTENCEPIECE_MODULE_RELATIVE);
#endif
#ifdef FERRY_SENTENCEPIECE_MODULE_BUILT
  candidates.emplace_back(FERRY_SENTENCEPIECE_MODULE_BUILT);
#endif
  return candidates;
}

// Whether a protobuf is in the process's global scope (the program, its libraries and those loaded
// RTLD_GLOBAL: what the program's own handle sees), where libsentencepiece's own copy would bind to it.
// Every protobuf since 3.0 defines both symbols.
bool protobuf_is_global() {
  void* program = ::dlopen(nullptr, RTLD_NOW);
  const bool global =
      program != nullptr && (::dlsym(program, "_ZN6google8protobuf23ShutdownProtobufLibraryEv") != nullptr ||
                             ::dlsym(program, "_ZN6google8protobuf8internal13VerifyVersionEiiPKc") != nullptr);
  if (program != nullptr) ::dlclose(program);
  return global;
}

Module open_module() {
  Module module;
  const bool deep_bind = protobuf_is_global();
  if (kSanitized && deep_bind) {
    module.error =
        "a sanitizer build of ferry cannot load sentencepiece beside the protobuf this program has loaded "
        "(keeping the two apart needs RTLD_DEEPBIND, which the sanitizers refuse): use a release build";
    return module;
  }
  if (!kModuleBuilt) {
    module.error =
        "this ferry was built without sentencepiece (Debian: apt-get install libsentencepiece-dev, then "
        "build ferry again)";
    return module;
  }
  std::string tried;
  for (const std::string& path : module_candidates()) {
    tried += (tried.empty() ? "" : ", ") + path;
    if (!is_file(path)) continue;
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | (deep_bind ? RTLD_DEEPBIND : 0));
    if (handle == nullptr) {
      const char* why = ::dlerror();
      module.error = "cannot load " + path + ": " + (why != nullptr ? why : "unknown error");
      return module;
    }
    module.load = reinterpret_cast<FerrySentencePieceLoad>(::dlsym(handle, "ferry_sentencepiece_load"));
    module.free = reinterpret_cast<FerrySentencePieceFree>(::dlsym(handle, "ferry_sentencepiece_free"));
    module.encode = reinterpret_cast<FerrySentencePieceEncode>(::dlsym(handle, "ferry_sentencepiece_encode_start"));
    if (module.load == nullptr || module.free == nullptr || module.encode == nullptr) {
      module = Module{};
      module.error = path +
                     " is not ferry's sentencepiece module (it lacks ferry_sentencepiece_load/free/encode_start: "
                     "one of another ferry version?)";
    }
    // Kept open for the process's life: models made from it may live until exit.
    return module;
  }
  module.error = "ferry's sentencepiece module (" + std::string(kModuleName) + ") is not installed: looked for " +
                 tried + " (FERRY_SENTENCEPIECE_MODULE names it)";
  return module;
}

const Module& module() {
  // Never destroyed: a model held by a static (Python's, a registry's) is freed after static destructors.
  static const Module* const opened = new Module(open_module());
  return *opened;
}

}  // namespace

std::optional<std::string> SentencePieceModel::unavailable() {
  const Module& opened = module();
  if (opened.load != nullptr) return std::nullopt;
  return opened.error;
}

std::shared_ptr<const SentencePieceModel> SentencePieceModel::load(const std::string& path) {
  if (const auto why = unavailable()) throw Error("sentencepiece model '" + path + "': " + *why);
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    throw Error("sentencepiece model: " + detail::missing_text(path, "file"));
  }
  if (!S_ISREG(info.st_mode)) throw Error("sentencepiece model '" + path + "' is not a regular file");
  FerrySentencePieceIds ids;
  char error[512] = {};
  void* handle = module().load(path.c_str(), &ids, error, sizeof(error));
  if (handle == nullptr) {
    throw Error("'" + path + "' is not a sentencepiece model (" + error + ")");
  }
  return std::shared_ptr<const SentencePieceModel>(new SentencePieceModel(path, handle, ids));
}

SentencePieceModel::~SentencePieceModel() { module().free(handle_); }

int64_t SentencePieceModel::encode(std::string_view text, int32_t* out, int64_t capacity) const {
  char error[512] = {};
  const int64_t count = module().encode(handle_, text.data(), text.size(), out, capacity, error, sizeof(error));
  if (count < 0) throw Error("sentencepiece (" + path_ + "): " + error);
  return count;
}

}  // namespace ferry
