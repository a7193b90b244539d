#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "ferry/pipeline/error.h"

namespace ferry {

/// One thing wrong with a config: where ("configs/demo.yaml:12:5" or "--set pool.slab_size=1x"),
/// which key ("pool.slab_size"; "" for the file as a whole) and what was expected and found.
struct ConfigProblem {
  std::string location;
  std::string key;
  std::string message;

  /// "configs/demo.yaml:12:5: pool.slab_size: expected a size such as 64MiB, found '1x'"
  std::string text() const;
};

/// A config that cannot run. It lists every problem found, not just the first, so that one round
/// of fixes is enough; what() is one problem per line. The `ferry` command exits with status 2.
class ConfigError : public Error {
 public:
  /// `more`: problems found beyond these and not kept (a file of a million unknown keys), said as a
  /// count at the end of what().
  explicit ConfigError(std::vector<ConfigProblem> problems, size_t more = 0);
  const std::vector<ConfigProblem>& problems() const noexcept { return problems_; }
  /// Problems found but not listed.
  size_t more() const noexcept { return more_; }

  /// The most problems a config's checks list; the rest are counted.
  static constexpr size_t kMaxListed = 100;

 private:
  explicit ConfigError(std::pair<std::vector<ConfigProblem>, size_t> listed);
  std::vector<ConfigProblem> problems_;
  size_t more_ = 0;
};

}  // namespace ferry
