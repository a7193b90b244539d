#include "ferry/assembly/config_error.h"

namespace ferry {
namespace {

// A message that starts with its own key (a check that names the key it is about, passed on by one
// that adds the key again) would say it twice: "cache.memory: cache.memory: ...".
std::vector<ConfigProblem> without_repeated_keys(std::vector<ConfigProblem> problems) {
  for (ConfigProblem& problem : problems) {
    const std::string prefix = problem.key + ": ";
    while (!problem.key.empty() && problem.message.rfind(prefix, 0) == 0) problem.message.erase(0, prefix.size());
  }
  return problems;
}

// The problems to list, and how many more there are: at most ConfigError::kMaxListed are listed.
std::pair<std::vector<ConfigProblem>, size_t> listed(std::vector<ConfigProblem> problems, size_t more) {
  problems = without_repeated_keys(std::move(problems));
  if (problems.size() > ConfigError::kMaxListed) {
    more += problems.size() - ConfigError::kMaxListed;
    problems.resize(ConfigError::kMaxListed);
  }
  return {std::move(problems), more};
}

std::string join(const std::vector<ConfigProblem>& problems, size_t more) {
  const size_t total = problems.size() + more;
  std::string text = total == 1 ? "invalid config:" : "invalid config (" + std::to_string(total) + " problems):";
  for (const ConfigProblem& problem : problems) text += "\n  " + problem.text();
  if (more != 0) text += "\n  ... and " + std::to_string(more) + " more (fix these first)";
  return text;
}

}  // namespace

std::string ConfigProblem::text() const {
  std::string text = location.empty() ? std::string() : location + ": ";
  if (!key.empty()) text += key + ": ";
  return text + message;
}

ConfigError::ConfigError(std::vector<ConfigProblem> problems, size_t more)
    : ConfigError(listed(std::move(problems), more)) {}

ConfigError::ConfigError(std::pair<std::vector<ConfigProblem>, size_t> listed)
    : Error(join(listed.first, listed.second)), problems_(std::move(listed.first)), more_(listed.second) {}

}  // namespace ferry
