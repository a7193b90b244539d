#pragma once

#include <optional>
#include <string>

// Files that must be regular ones: what ferry reads at any offset or maps (tar shards, a Megatron
// dataset, image files, a config, a saved state) and what it writes by renaming a new file into place
// (a saved state, a report, a dataset). A FIFO would block the open until a writer came, and no signal
// would stop the wait; a device could be endless; renaming over either replaces it with a regular file.
// Internal: not installed.

namespace ferry::detail {

/// What `path` is when it exists and is not a regular file (links followed): "a FIFO", "a directory",
/// "a character device", "a block device", "a socket", "a special file"; nullopt for a regular file or a path that
/// cannot be looked at (missing: the caller says that in its own words).
std::optional<std::string> special_file_kind(const std::string& path);

/// open(path, O_RDONLY | O_CLOEXEC) that never blocks: a FIFO or a device is opened without waiting,
/// found to be one and closed. Returns the descriptor, or -1 with `why` set to errno's message or
/// "is a FIFO, not a regular file" (and the like).
int open_regular_file(const std::string& path, std::string& why);

/// The file `path` finally names when it is a symbolic link (links followed, relative ones from their
/// own folder), `path` itself otherwise; also for a dangling link, whose target a writer creates. A
/// writer that renames a new file into place renames it over this, so that a link the user gave keeps
/// pointing at what was written.
std::string link_target(const std::string& path);

/// The folder of `path`: "." for a bare name, "/" for a file at the root.
std::string folder_of(const std::string& path);

/// Why a new file cannot be renamed into place at `path`, or nullopt: `path` (its link target) exists
/// and is not a regular file, say a FIFO or /dev/null, which the rename would replace.
std::optional<std::string> not_replaceable(const std::string& path);

/// Whether `a` and `b` name the same file: the same inode where both exist, otherwise the same
/// absolute path once links in their folders are resolved.
bool same_file(const std::string& a, const std::string& b);

}  // namespace ferry::detail
