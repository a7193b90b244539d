#include "ferry/io/util/mapped_file.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ferry/io/util/regular_file.h"
#include "ferry/pipeline/error.h"

namespace ferry::detail {

std::shared_ptr<const std::byte> map_file(const std::string& path, std::string_view what, MappedAccess access,
                                          size_t& bytes) {
  const std::string where(what);
  std::string why;
  const int fd = open_regular_file(path, why);
  if (fd < 0) throw Error(where + ": cannot open " + path + ": " + why);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat status {};
  if (::fstat(fd, &status) != 0) throw Error(where + ": cannot stat " + path + ": " + std::strerror(errno));
  if (!S_ISREG(status.st_mode)) throw Error(where + ": " + path + " is not a regular file");
  bytes = static_cast<size_t>(status.st_size);
  if (bytes == 0) return nullptr;
  void* data = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    throw Error(where + ": cannot map " + path + " (" + std::to_string(bytes) + " bytes): " + std::strerror(errno));
  }
  // Samples read at random offsets would waste most of the read-ahead of whole neighbourhoods.
  ::madvise(data, bytes, access == MappedAccess::kRandom ? MADV_RANDOM : MADV_SEQUENTIAL);
  const size_t length = bytes;
  return std::shared_ptr<const std::byte>(static_cast<const std::byte*>(data), [length](const std::byte* mapped) {
    ::munmap(const_cast<std::byte*>(mapped), length);
  });
}

}  // namespace ferry::detail
