#include "ferry/assembly/text_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ferry/assembly/config_error.h"
#include "ferry/io/util/regular_file.h"
#include "ferry/io/util/units.h"

namespace ferry {

std::string read_text_file(const std::string& path, size_t max_bytes, const std::string& what) {
  // Only a regular file: a directory would read as an empty config ("source: missing required key"),
  // and opening a FIFO would wait for a writer that may never come, deaf to Ctrl-C.
  if (const auto kind = detail::special_file_kind(path))
    throw ConfigError({{path, "", "is " + *kind + ", not a " + what}});
  std::string why;
  const int fd = detail::open_regular_file(path, why);
  if (fd < 0) throw ConfigError({{path, "", "cannot open the " + what + ": " + why}});
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::string text;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ConfigError({{path, "", "cannot read the " + what + ": " + std::string(std::strerror(errno))}});
    if (n == 0) return text;
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      throw ConfigError(
          {{path, "",
            "more than " + format_byte_size(max_bytes) + ": too large for a " + what + " (is it the right file?)"}});
    }
  }
}

}  // namespace ferry
