#include "ferry/io/util/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace ferry::detail {
namespace {

std::optional<std::string> kind_of(mode_t mode) {
  if (S_ISREG(mode)) return std::nullopt;
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

std::string not_regular_text(const std::string& kind) { return "is " + kind + ", not a regular file"; }

// `path` absolute, with the links in its folder resolved (the file itself may not exist yet).
std::string canonical_spelling(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  char resolved[PATH_MAX];
  if (::realpath(folder_of(path).c_str(), resolved) == nullptr) return path;
  const std::string folder = resolved;
  return (folder == "/" ? "" : folder) + "/" + name;
}

}  // namespace

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::optional<std::string> special_file_kind(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;
  return kind_of(info.st_mode);
}

int open_regular_file(const std::string& path, std::string& why) {
  // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer; O_NOCTTY:
  // a terminal named by mistake does not become this process's.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    why = std::strerror(errno);
    return -1;
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  if (const auto kind = kind_of(info.st_mode)) {
    why = not_regular_text(*kind);
    ::close(fd);
    return -1;
  }
  // Back to blocking reads: for a regular file O_NONBLOCK changes nothing, but say what is meant.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string link_target(const std::string& path) {
  std::string current = path;
  for (int hops = 0; hops < 40; ++hops) {  // Linux's own limit on links in a path
    struct stat info {};
    if (::lstat(current.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) return current;
    char target[PATH_MAX];
    const ssize_t n = ::readlink(current.c_str(), target, sizeof target - 1);
    if (n < 0) return current;
    const std::string next(target, static_cast<size_t>(n));
    current = next.front() == '/' || current.find('/') == std::string::npos ? next : folder_of(current) + "/" + next;
  }
  return current;  // a loop of links: the open or rename then says so
}

std::optional<std::string> not_replaceable(const std::string& path) {
  const auto kind = special_file_kind(path);
  if (!kind) return std::nullopt;
  return not_regular_text(*kind) + ": ferry writes a new file and renames it into place, which would replace it";
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat info_a {};
  struct stat info_b {};
  const bool a_exists = ::stat(a.c_str(), &info_a) == 0;
  const bool b_exists = ::stat(b.c_str(), &info_b) == 0;
  if (a_exists && b_exists) return info_a.st_dev == info_b.st_dev && info_a.st_ino == info_b.st_ino;
  if (a_exists != b_exists) return false;
  return canonical_spelling(link_target(a)) == canonical_spelling(link_target(b));
}

}  // namespace ferry::detail
