#include "ferry/pipeline/malloc_name.h"

#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <vector>

#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

namespace ferry {
namespace {

// The loaded libraries in the order the dynamic linker searches them for a symbol: preloaded ones
// first, then those the program was linked to. The program itself (no name) is left out: where it
// takes malloc's address, its own PLT entry stands in for malloc and would hide the library behind
// it (/usr/bin/python3 does). So a malloc linked statically into a program is not seen.
// Empty if even that list cannot be made (no exception may cross the loader's C frames).
std::vector<std::string> libraries_in_search_order() noexcept {
  std::vector<std::string> found;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
        try {
          static_cast<std::vector<std::string>*>(out)->emplace_back(info->dlpi_name);
          return 0;
        } catch (...) {
          return 1;  // stops the walk
        }
      },
      &found);
  return found;
}

// A sanitizer's runtime replaces malloc, and may be linked into the program itself (clang) or loaded
// ahead of libc (gcc): its own entry point says which one.
std::string sanitizer_malloc() {
  if (::dlsym(RTLD_DEFAULT, "__tsan_init") != nullptr) return "ThreadSanitizer's";
  if (::dlsym(RTLD_DEFAULT, "__msan_init") != nullptr) return "MemorySanitizer's";
  if (::dlsym(RTLD_DEFAULT, "__asan_init") != nullptr) return "AddressSanitizer's";
  return "";
}

// What the malloc in a library (its handle) says it is, or "".
std::string name_in(void* scope) {
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  using TcVersion = const char* (*)(int*, int*, const char**);
  if (auto mallctl = reinterpret_cast<Mallctl>(::dlsym(scope, "mallctl"))) {
    const char* version = nullptr;
    size_t length = sizeof version;
    return mallctl("version", &version, &length, nullptr, 0) == 0 && version != nullptr
               ? std::string("jemalloc ") + version
               : "jemalloc";
  }
  if (auto tc_version = reinterpret_cast<TcVersion>(::dlsym(scope, "tc_version"))) {
    int major = 0;
    int minor = 0;
    const char* patch = nullptr;
    (void)tc_version(&major, &minor, &patch);
    return "tcmalloc " + std::to_string(major) + "." + std::to_string(minor) + (patch != nullptr ? patch : "");
  }
  return "";
}

}  // namespace

std::string malloc_name() try {
  if (std::string sanitizer = sanitizer_malloc(); !sanitizer.empty()) return sanitizer;
  // Else the first library that defines malloc itself serves every call to it.
  for (const std::string& path : libraries_in_search_order()) {
    void* const library = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (library == nullptr) continue;
    // dlsym on a handle searches the library, then what it depends on: the symbol must be its own.
    void* const symbol = ::dlsym(library, "malloc");
    Dl_info where{};
    const bool defines =
        symbol != nullptr && ::dladdr(symbol, &where) != 0 && where.dli_fname != nullptr && path == where.dli_fname;
    std::string name;
    if (defines) {
      name = name_in(library);
#if defined(__GLIBC__)
      if (name.empty() && path.find("libc.so") != std::string::npos) {
        name = std::string("glibc ") + ::gnu_get_libc_version();
      }
#endif
      if (name.empty()) name = "malloc of " + path;
    }
    ::dlclose(library);
    if (defines) return name;
  }
  return "unknown";
} catch (...) {  // only std::bad_alloc can come here
  return "unknown";
}

}  // namespace ferry
