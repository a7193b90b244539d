#include "ferry/io/util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "ferry/io/util/regular_file.h"
#include "ferry/pipeline/error.h"

namespace ferry {

// A link is written through (its target replaced, the link kept), and what a rename would replace but is
// not a file (a FIFO, /dev/null) is refused.
AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), target_(detail::link_target(path_)), partial_(target_ + ".partial") {
  if (const auto why = detail::not_replaceable(path_)) throw Error("cannot write " + path_ + ": it " + *why);
  fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot create " + partial_ + ": " + std::strerror(errno));
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      target_(std::move(other.target_)),
      partial_(std::move(other.partial_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      committed_(std::exchange(other.committed_, true)) {}  // the moved-from one removes nothing

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(partial_.c_str());
}

void AtomicFile::write(std::string_view bytes) {
  if (committed_ || fd_ < 0) throw Error("cannot write " + path_ + ": already committed");
  const char* data = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot write " + partial_ + " at byte offset " + std::to_string(size_) + ": " +
                  std::strerror(errno));
    }
    data += n;
    left -= static_cast<size_t>(n);
    size_ += static_cast<uint64_t>(n);
  }
}

void AtomicFile::commit() {
  if (committed_ || fd_ < 0) throw Error("cannot commit " + path_ + " twice");
  // close() reports write-back errors some file systems (NFS) only find then.
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) throw Error("cannot write " + partial_ + " (close failed): " + std::strerror(errno));
  if (::rename(partial_.c_str(), target_.c_str()) != 0) {
    throw Error("cannot rename " + partial_ + " to " + path_ + ": " + std::strerror(errno));
  }
  committed_ = true;
}

void AtomicFile::write_whole(const std::string& path, std::string_view bytes) {
  AtomicFile file(path);
  file.write(bytes);
  file.commit();
}

}  // namespace ferry
