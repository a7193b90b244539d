#include "ferry/io/remote/stream_decoder.h"

#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <vector>

#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

constexpr size_t kHead = 6;
constexpr size_t kChunk = 256 * 1024;

}  // namespace

std::string_view compression_of(std::string_view head) {
  using namespace std::string_view_literals;
  // Whole magic numbers (gzip's with its one method, bzip2's with its level and block magic): a tar
  // shard's first member may well be named "BZh.cls".
  if (head.starts_with("\x1f\x8b\x08"sv)) return "gzip";
  if (head.starts_with("\x28\xb5\x2f\xfd"sv)) return "zstd";
  if (head.starts_with("\xfd"
                       "7zXZ\0"sv))
    return "xz";
  if (head.size() >= 6 && head.starts_with("BZh"sv) && head[3] >= '1' && head[3] <= '9' && head.substr(4, 2) == "1A") {
    return "bzip2";
  }
  return "";
}

namespace detail {

// One of the three decompressors; `feed` decompresses what it is given to `out`, `ended` says whether
// the last frame was complete.
struct StreamCodec {
  virtual ~StreamCodec() = default;
  virtual void feed(const char* data, size_t size, const ByteSink& out, const std::string& what, uint64_t offset) = 0;
  virtual bool ended() const = 0;
  std::vector<char> buffer = std::vector<char>(kChunk);
};

}  // namespace detail

namespace {

struct Gzip : detail::StreamCodec {
  z_stream stream{};
  bool between = true;  // no member begun, or the last one ended (gzip files may be concatenated)
  Gzip() {
    if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) throw Error("zlib could not start");
  }
  ~Gzip() override { inflateEnd(&stream); }
  void feed(const char* data, size_t size, const ByteSink& out, const std::string& what, uint64_t offset) override {
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    stream.avail_in = static_cast<uInt>(size);
    while (stream.avail_in > 0) {
      if (between) {
        inflateReset(&stream);
        between = false;
      }
      stream.next_out = reinterpret_cast<Bytef*>(buffer.data());
      stream.avail_out = static_cast<uInt>(buffer.size());
      const int code = inflate(&stream, Z_NO_FLUSH);
      if (code != Z_OK && code != Z_STREAM_END && code != Z_BUF_ERROR) {
        throw Error(what + ": bad gzip data near compressed byte " + std::to_string(offset + size - stream.avail_in) +
                    (stream.msg != nullptr ? std::string(" (") + stream.msg + ")" : std::string()));
      }
      out(buffer.data(), buffer.size() - stream.avail_out);
      if (code == Z_STREAM_END) between = true;
    }
  }
  bool ended() const override { return between; }
};

struct Zstd : detail::StreamCodec {
  ZSTD_DStream* stream = ZSTD_createDStream();
  size_t last = 0;  // ZSTD_decompressStream's last hint: 0 once a frame is complete
  Zstd() {
    if (stream == nullptr) throw Error("libzstd could not start");
    ZSTD_initDStream(stream);
  }
  ~Zstd() override { ZSTD_freeDStream(stream); }
  void feed(const char* data, size_t size, const ByteSink& out, const std::string& what, uint64_t offset) override {
    ZSTD_inBuffer in{data, size, 0};
    while (in.pos < in.size) {
      ZSTD_outBuffer put{buffer.data(), buffer.size(), 0};
      last = ZSTD_decompressStream(stream, &put, &in);
      if (ZSTD_isError(last)) {
        throw Error(what + ": bad zstd data near compressed byte " + std::to_string(offset + in.pos) + " (" +
                    ZSTD_getErrorName(last) + ")");
      }
      out(buffer.data(), put.pos);
    }
    // Output may still be held inside after the input is used up.
    // (A call that gives nothing says nothing of the frame: after a complete one it asks for the next.)
    while (last != 0) {
      ZSTD_outBuffer put{buffer.data(), buffer.size(), 0};
      ZSTD_inBuffer none{nullptr, 0, 0};
      const size_t hint = ZSTD_decompressStream(stream, &put, &none);
      if (ZSTD_isError(hint) || put.pos == 0) break;
      last = hint;
      out(buffer.data(), put.pos);
    }
  }
  bool ended() const override { return last == 0; }
};

struct Xz : detail::StreamCodec {
  lzma_stream stream = LZMA_STREAM_INIT;
  bool done = false;
  Xz() {
    if (lzma_stream_decoder(&stream, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK) throw Error("liblzma could not start");
  }
  ~Xz() override { lzma_end(&stream); }
  void run(lzma_action action, const ByteSink& out, const std::string& what, uint64_t offset, size_t size) {
    for (;;) {
      stream.next_out = reinterpret_cast<uint8_t*>(buffer.data());
      stream.avail_out = buffer.size();
      const lzma_ret code = lzma_code(&stream, action);
      out(buffer.data(), buffer.size() - stream.avail_out);
      if (code == LZMA_STREAM_END) {
        done = true;
        return;
      }
      if (code != LZMA_OK && code != LZMA_BUF_ERROR) {
        throw Error(what + ": bad xz data near compressed byte " + std::to_string(offset + size - stream.avail_in) +
                    " (liblzma error " + std::to_string(static_cast<int>(code)) + ")");
      }
      if (stream.avail_in == 0 && stream.avail_out != 0) return;
      if (code == LZMA_BUF_ERROR) return;
    }
  }
  void feed(const char* data, size_t size, const ByteSink& out, const std::string& what, uint64_t offset) override {
    stream.next_in = reinterpret_cast<const uint8_t*>(data);
    stream.avail_in = size;
    run(LZMA_RUN, out, what, offset, size);
  }
  void finish(const ByteSink& out, const std::string& what, uint64_t offset) {
    stream.next_in = nullptr;
    stream.avail_in = 0;
    run(LZMA_FINISH, out, what, offset, 0);
  }
  bool ended() const override { return done; }
};

}  // namespace

StreamDecoder::StreamDecoder(std::string what, ByteSink out) : what_(std::move(what)), out_(std::move(out)) {}

StreamDecoder::~StreamDecoder() = default;

void StreamDecoder::start() {
  format_ = compression_of(head_);
  if (format_ == "gzip") codec_ = std::make_unique<Gzip>();
  if (format_ == "zstd") codec_ = std::make_unique<Zstd>();
  if (format_ == "xz") codec_ = std::make_unique<Xz>();
  if (format_ == "bzip2") {
    throw Error(what_ +
                ": is bzip2-compressed, which ferry does not decompress: recompress it with gzip, zstd or xz "
                "(bunzip2 -c SHARD.tar.bz2 | zstd -o SHARD.tar.zst), or unpack it");
  }
  started_ = true;
  const std::string head = std::move(head_);
  head_.clear();
  write(head.data(), head.size());
}

void StreamDecoder::write(const char* data, size_t size) {
  if (!started_) {
    const size_t take = std::min(size, kHead - head_.size());
    head_.append(data, take);
    data += take;
    size -= take;
    if (head_.size() < kHead) return;
    start();
  }
  if (size == 0) return;
  if (codec_) {
    codec_->feed(data, size, out_, what_, offset_);
  } else {
    out_(data, size);
  }
  offset_ += size;
}

void StreamDecoder::finish() {
  if (!started_) start();  // shorter than a magic number: passed through as it is
  if (auto* xz = dynamic_cast<Xz*>(codec_.get())) xz->finish(out_, what_, offset_);
  if (codec_ && !codec_->ended()) {
    throw Error(what_ + ": the " + std::string(format_) + " stream ends inside a frame after " +
                std::to_string(offset_) + " compressed bytes: the file is cut short");
  }
}

}  // namespace ferry
