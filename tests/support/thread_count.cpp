#include "tests/support/thread_count.h"

#include <dirent.h>

namespace ferry::testing {

size_t thread_count() {
  size_t count = 0;
  if (DIR* handle = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(handle)) count += entry->d_name[0] != '.';
    closedir(handle);
  }
  return count;
}

}  // namespace ferry::testing
