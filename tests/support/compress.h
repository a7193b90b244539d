#pragma once

#include <string>

// Compressed copies of bytes, made with the libraries ferry decodes with (zlib, libzstd, liblzma), for
// tests of compressed shards: no command-line tool needed.

namespace ferry::testing {

std::string gzip_bytes(const std::string& data);
std::string zstd_bytes(const std::string& data);
std::string xz_bytes(const std::string& data);

}  // namespace ferry::testing
