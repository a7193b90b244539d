#include "cli/output_files.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <ferry/io/util/atomic_file.h>
#include <ferry/io/util/regular_file.h>

namespace ferry::cli {
namespace {

std::string named(const NamedFile& file) { return file.what + " '" + file.path + "'"; }

}  // namespace

void check_outputs(const std::vector<NamedFile>& outputs, const std::vector<NamedFile>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedFile& output = outputs[i];
    if (output.path.empty()) throw std::invalid_argument(output.what + ": an empty path");
    if (const auto why = detail::not_replaceable(output.path)) {
      throw std::invalid_argument(output.what + ": '" + output.path + "' " + *why);
    }
    // A link is written through: the new file goes beside its target.
    const std::string folder = detail::folder_of(detail::link_target(output.path));
    if (::access(folder.c_str(), W_OK) != 0) {
      throw std::invalid_argument(output.what + ": cannot write into the folder '" + folder +
                                  "': " + std::strerror(errno));
    }
    for (const NamedFile& input : inputs) {
      // Only a file that is there can be overwritten (a value such as source.kind names none).
      if (input.path.empty() || ::access(input.path.c_str(), F_OK) != 0) continue;
      if (detail::same_file(output.path, input.path)) {
        throw std::invalid_argument(named(output) + " is " + named(input) + ": writing it would overwrite what the run reads");
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (detail::same_file(output.path, outputs[j].path)) {
        throw std::invalid_argument(named(output) + " is " + named(outputs[j]) +
                                    ": each would overwrite the other; give them different paths");
      }
    }
  }
}

void write_file(const std::string& path, const std::string& text) { AtomicFile::write_whole(path, text); }

bool stdout_written(const char* what) {
  static bool failed = false;  // said once: a second flush of a failed stream fails again
  if (failed) return false;
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int error = errno;
  if (flushed && std::ferror(stdout) == 0) return true;
  std::fprintf(stderr, "ferry: cannot write %s to standard output: %s\n", what,
               error != 0 ? std::strerror(error) : "a write failed");
  failed = true;
  return false;
}

}  // namespace ferry::cli
