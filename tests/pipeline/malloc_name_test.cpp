#include <ferry/pipeline/malloc_name.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

// A sanitizer build runs with the sanitizer's malloc (gcc and clang spell the test differently).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define FERRY_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define FERRY_TEST_SANITIZED 1
#endif
#endif
#ifndef FERRY_TEST_SANITIZED
#define FERRY_TEST_SANITIZED 0
#endif

namespace ferry {
namespace {

[[maybe_unused]] bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

// The test binaries are linked to no malloc of their own (cmake/FerryMalloc.cmake links only the
// programs), so they run with glibc's unless one is preloaded or a sanitizer brings its own.
TEST(MallocName, NamesTheMallocThisProcessRunsWithAndItsVersion) {
  const std::string name = malloc_name();
  EXPECT_EQ(malloc_name(), name);
#if FERRY_TEST_SANITIZED
  EXPECT_TRUE(name == "ThreadSanitizer's" || name == "AddressSanitizer's") << name;
#else
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
#endif
}

}  // namespace
}  // namespace ferry
