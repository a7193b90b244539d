#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

// Shards compressed with gzip, zstd or xz, decompressed as their bytes arrive. Internal: not installed.

namespace ferry {

namespace detail {
struct StreamCodec;  // a decompressor (stream_decoder.cpp)
}

/// Where decompressed (or passed-through) bytes go.
using ByteSink = std::function<void(const char* data, size_t size)>;

/// The compression a stream starting with `head` (its first bytes, 6 are enough) is in: "gzip", "zstd",
/// "xz", "bzip2", or "" for none of them.
std::string_view compression_of(std::string_view head);

/// Turns a stream's bytes into its content for `out`: the stream's first bytes say whether it is gzip
/// (zlib), zstd (libzstd) or xz (liblzma), decompressed as they come; anything else passes through.
/// bzip2 is refused (no decoder: recompress the shards with gzip, zstd or xz). One stream, fed in order
/// by one thread. Errors are ferry::Error naming `what` and the compressed byte offset.
class StreamDecoder {
 public:
  StreamDecoder(std::string what, ByteSink out);
  ~StreamDecoder();
  StreamDecoder(const StreamDecoder&) = delete;
  StreamDecoder& operator=(const StreamDecoder&) = delete;

  void write(const char* data, size_t size);
  /// The stream ended: throws ferry::Error when it ended inside a compressed frame (a cut file).
  void finish();
  /// "gzip", "zstd", "xz", or "" (passed through); known after the first bytes.
  std::string_view format() const noexcept { return format_; }

 private:
  void start();

  std::string what_;
  ByteSink out_;
  std::string head_;  // the first bytes, until the format is known
  std::string_view format_;
  bool started_ = false;
  uint64_t offset_ = 0;  // compressed bytes consumed
  std::unique_ptr<detail::StreamCodec> codec_;
};

}  // namespace ferry
