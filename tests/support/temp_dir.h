#pragma once

#include <string>

namespace ferry::testing {

/// A fresh directory under $TMPDIR (or /tmp) for one test's files; the destructor removes everything
/// in it, sub-folders too (links are removed, not followed), then the directory. Plain POSIX calls: std::filesystem and
/// ::testing::TempDir() crashed tests built with g++ 13 against a libtorch of another libstdc++. Not thread-safe;
/// one test owns it.
class TempDir {
 public:
  /// Throws std::runtime_error if mkdtemp fails.
  explicit TempDir(const std::string& prefix = "ferry_test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const noexcept { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ferry::testing
