#include "tests/support/compress.h"

#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <stdexcept>

namespace ferry::testing {

std::string gzip_bytes(const std::string& data) {
  z_stream stream{};
  if (deflateInit2(&stream, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("zlib: deflateInit2 failed");
  }
  std::string out(deflateBound(&stream, data.size()) + 64, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int code = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  if (code != Z_STREAM_END) throw std::runtime_error("zlib: deflate did not finish");
  return out;
}

std::string zstd_bytes(const std::string& data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const size_t size = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3);
  if (ZSTD_isError(size)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(size));
  out.resize(size);
  return out;
}

std::string xz_bytes(const std::string& data) {
  std::string out(lzma_stream_buffer_bound(data.size()), '\0');
  size_t written = 0;
  if (lzma_easy_buffer_encode(6, LZMA_CHECK_CRC64, nullptr, reinterpret_cast<const uint8_t*>(data.data()), data.size(),
                              reinterpret_cast<uint8_t*>(out.data()), &written, out.size()) != LZMA_OK) {
    throw std::runtime_error("liblzma: lzma_easy_buffer_encode failed");
  }
  out.resize(written);
  return out;
}

}  // namespace ferry::testing
