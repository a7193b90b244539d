#include <ferry/pipeline/malloc_name.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace ferry {
namespace {

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// The test binaries are linked to no malloc of their own (cmake/FerryMalloc.cmake links only the
// programs), so they run with glibc's unless one is preloaded.
TEST(MallocName, NamesTheMallocThisProcessRunsWithAndItsVersion) {
  const std::string name = malloc_name();
  EXPECT_EQ(malloc_name(), name);
  const char* preload = std::getenv("LD_PRELOAD");
  const std::string preloaded = preload != nullptr ? preload : "";
  if (preloaded.find("jemalloc") != std::string::npos) {
    EXPECT_TRUE(starts_with(name, "jemalloc ")) << name;
  } else if (preloaded.find("tcmalloc") != std::string::npos) {
    EXPECT_TRUE(starts_with(name, "tcmalloc ")) << name;
  } else {
#if defined(__GLIBC__)
    EXPECT_TRUE(starts_with(name, "glibc 2.")) << name;
#else
    EXPECT_EQ(name, "unknown");
#endif
  }
}

}  // namespace
}  // namespace ferry
