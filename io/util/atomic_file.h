#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ferry {

/// A file that appears whole or not at all: the bytes go to `<path>.partial`, and commit() renames
/// that into place. Until then a reader sees the previous file at `path` (or none), never half of
/// the new one; a writer that fails or is abandoned leaves no `.partial` behind (the destructor
/// removes it). A symbolic link at `path` is written through: its target is replaced and the link
/// kept. What is not a regular file (a FIFO, a device) is refused rather than replaced. For dataset writers: a tar shard streamed member by member, a generated image.
///
/// No fsync: the rename makes the file visible atomically to other processes, which is what a
/// dataset reader needs; surviving a power cut is not worth a disk flush per file for data that a
/// command can write again.
///
/// Owns one open descriptor until commit() or destruction. One thread at a time: not thread-safe
/// (different AtomicFiles may be used by different threads at once). Every method blocks on file
/// I/O; write() does not buffer (give it whole members, not bytes). Errors are ferry::Error naming
/// the path, what failed and errno's message.
class AtomicFile {
 public:
  /// Creates (or truncates) `<path>.partial` (beside a link's target) with mode 0644. Throws
  /// ferry::Error if it cannot, or when `path` is there but not a regular file.
  explicit AtomicFile(std::string path);
  /// Without a successful commit(): closes and removes `<path>.partial`. Never throws.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) = delete;

  /// Appends all of `bytes` (retrying short writes and EINTR). Throws ferry::Error naming the path
  /// and the byte offset, or when called after commit().
  void write(std::string_view bytes);
  /// Closes the file and renames it to `path`, replacing a file there. Throws ferry::Error (the
  /// partial file is then removed) on a failed close or rename, and when called twice.
  void commit();

  const std::string& path() const noexcept { return path_; }
  /// Bytes written so far.
  uint64_t size() const noexcept { return size_; }

  /// `bytes` as the whole content of `path`, atomically: AtomicFile(path), write, commit.
  static void write_whole(const std::string& path, std::string_view bytes);

 private:
  std::string path_;
  std::string target_;  // path_, or the file its link names: what the rename replaces
  std::string partial_;
  int fd_ = -1;
  uint64_t size_ = 0;
  bool committed_ = false;
};

}  // namespace ferry
