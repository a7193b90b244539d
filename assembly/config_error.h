#pragma once

#include <string>
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
  explicit ConfigError(std::vector<ConfigProblem> problems);
  const std::vector<ConfigProblem>& problems() const noexcept { return problems_; }

 private:
  std::vector<ConfigProblem> problems_;
};

}  // namespace ferry
