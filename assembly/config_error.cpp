#include "ferry/assembly/config_error.h"

namespace ferry {
namespace {

std::string join(const std::vector<ConfigProblem>& problems) {
  std::string text =
      problems.size() == 1 ? "invalid config:" : "invalid config (" + std::to_string(problems.size()) + " problems):";
  for (const ConfigProblem& problem : problems) text += "\n  " + problem.text();
  return text;
}

}  // namespace

std::string ConfigProblem::text() const {
  std::string text = location.empty() ? std::string() : location + ": ";
  if (!key.empty()) text += key + ": ";
  return text + message;
}

ConfigError::ConfigError(std::vector<ConfigProblem> problems) : Error(join(problems)), problems_(std::move(problems)) {}

}  // namespace ferry
