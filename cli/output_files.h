#pragma once

#include <string>
#include <vector>

namespace ferry::cli {

/// A file a command reads or writes, with what named it ("--report", "stats.report", "the config").
struct NamedFile {
  std::string what;
  std::string path;
};

/// Fails before a run, not after it, for what the run would write at its end: each of `outputs` must
/// be a path a new file can be renamed to (not a FIFO, a device or a folder; a link is written
/// through), in a folder this process can write, and none may be one of `inputs` (which it would
/// overwrite) or another output (one would overwrite the other). Throws std::invalid_argument naming
/// both paths and what named them: a usage error. `inputs` that do not exist are skipped.
void check_outputs(const std::vector<NamedFile>& outputs, const std::vector<NamedFile>& inputs);

/// `text` as the whole of `path`, written beside it and renamed into place, through a link: a crash
/// mid-write leaves the file that was there, never half of the new one. Throws ferry::Error.
void write_file(const std::string& path, const std::string& text);

/// Whether everything printed on standard output reached it: flushes it, and on a failed write
/// (a full disk, a closed pipe, /dev/full) prints "ferry: cannot write <what> to standard output: ..."
/// on standard error and returns false (said once: later calls return false silently).
bool stdout_written(const char* what);

}  // namespace ferry::cli
