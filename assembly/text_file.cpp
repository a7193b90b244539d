#include "ferry/assembly/text_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "ferry/assembly/config_error.h"
#include "ferry/io/util/units.h"

namespace ferry {

std::string read_text_file(const std::string& path, size_t max_bytes, const std::string& what) {
  struct stat info{};
  // An ifstream opens a directory and reads nothing from it: without this, the message would be
  // about an empty config ("source: missing required key").
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    throw ConfigError({{path, "", "is a directory, not a " + what}});
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) throw ConfigError({{path, "", "cannot open the " + what + ": " + std::string(std::strerror(errno))}});
  std::string text;
  char chunk[1 << 16];
  while (file.read(chunk, sizeof chunk) || file.gcount() > 0) {
    text.append(chunk, static_cast<size_t>(file.gcount()));
    if (text.size() > max_bytes) {
      throw ConfigError({{path, "", "more than " + format_byte_size(max_bytes) + ": too large for a " + what +
                                        " (is it the right file?)"}});
    }
  }
  if (file.bad()) throw ConfigError({{path, "", "cannot read the " + what + ": " + std::string(std::strerror(errno))}});
  return text;
}

}  // namespace ferry
