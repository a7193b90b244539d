#pragma once

#include <cstddef>

namespace ferry::testing {

/// Threads this process has now (from /proc/self/task): tests check that validation starts none.
size_t thread_count();

}  // namespace ferry::testing
