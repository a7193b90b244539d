#pragma once

#include <string>

namespace ferry {

/// The malloc this process runs with, and its version: "jemalloc 5.3.0-0-g54ea...", "tcmalloc 2.10",
/// "glibc 2.36", "malloc of <library>", "ThreadSanitizer's" (or Address, Memory), or "unknown". Asked of the process
/// itself, so it also tells a malloc preloaded with LD_PRELOAD (the way a Python program gets one); one linked
/// statically into the program is not seen. Batches of thousands of tensors cost their consumer several times more to
/// drop with glibc's than with jemalloc or tcmalloc (cmake/FerryMalloc.cmake says by how much). Thread-safe; never
/// throws.
std::string malloc_name();

}  // namespace ferry
