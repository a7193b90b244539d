// StreamDecoder: gzip, zstd and xz streams (made here with the same libraries) decode to their bytes
// whatever the pieces they arrive in; plain bytes pass through; a cut stream and bzip2 are errors.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include <ferry/io/remote/stream_decoder.h>
#include <ferry/pipeline/error.h>

#include "tests/support/compress.h"

namespace ferry {
namespace {

std::string random_text(size_t size, uint32_t seed) {
  std::mt19937 random(seed);
  std::string text(size, '\0');
  // Half compressible runs, half noise: frames of several sizes.
  for (size_t i = 0; i < size; ++i)
    text[i] = (i / 64) % 2 == 0 ? static_cast<char>('a' + (i / 640) % 26) : static_cast<char>(random());
  return text;
}

std::string gzip(const std::string& data) { return testing::gzip_bytes(data); }
std::string zstd(const std::string& data) { return testing::zstd_bytes(data); }
std::string xz(const std::string& data) { return testing::xz_bytes(data); }

// Decodes `stream` fed in pieces of `piece` bytes.
std::string decode(const std::string& stream, size_t piece, std::string* format = nullptr) {
  std::string out;
  StreamDecoder decoder("shard.tar.x", [&out](const char* data, size_t size) { out.append(data, size); });
  for (size_t at = 0; at < stream.size(); at += piece) {
    decoder.write(stream.data() + at, std::min(piece, stream.size() - at));
  }
  decoder.finish();
  if (format != nullptr) *format = std::string(decoder.format());
  return out;
}

TEST(StreamDecoder, DecodesEachFormatWhateverThePiecesItArrivesIn) {
  for (const size_t size : {size_t{0}, size_t{1}, size_t{5000}, size_t{3'000'000}}) {
    const std::string data = random_text(size, static_cast<uint32_t>(size));
    for (const auto& [name, stream] : {std::pair{"gzip", gzip(data)}, std::pair{"zstd", zstd(data)},
                                       std::pair{"xz", xz(data)}, std::pair{"", data}}) {
      for (const size_t piece : {size_t{1}, size_t{7}, size_t{65536}, size_t{1} << 22}) {
        if (piece == 1 && stream.size() > 100'000) continue;
        std::string format;
        EXPECT_EQ(decode(stream, piece, &format), data) << name << " " << size << " bytes in pieces of " << piece;
        if (size > 0 || std::string(name).empty()) {
          EXPECT_EQ(format, name);
        }
      }
    }
  }
}

TEST(StreamDecoder, ConcatenatedGzipMembersAndZstdFramesDecodeToBoth) {
  const std::string a = random_text(70'000, 1), b = random_text(30'000, 2);
  EXPECT_EQ(decode(gzip(a) + gzip(b), 4096), a + b);
  EXPECT_EQ(decode(zstd(a) + zstd(b), 4096), a + b);
}

TEST(StreamDecoder, AStreamCutShortIsAnErrorNamingTheFile) {
  const std::string data = random_text(500'000, 3);
  for (const std::string& stream : {gzip(data), zstd(data), xz(data)}) {
    try {
      decode(stream.substr(0, stream.size() / 2), 4096);
      ADD_FAILURE() << "a cut stream decoded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("shard.tar.x"), std::string::npos) << e.what();
    }
  }
}

TEST(StreamDecoder, CorruptDataIsAnErrorWithTheOffset) {
  std::string stream = gzip(random_text(200'000, 4));
  for (size_t i = 100; i < 200; ++i) stream[i] = static_cast<char>(~stream[i]);
  try {
    decode(stream, 4096);
    ADD_FAILURE() << "corrupt gzip decoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad gzip data near compressed byte"), std::string::npos) << e.what();
  }
}

TEST(StreamDecoder, Bzip2IsRefusedSayingHowToRecompress) {
  try {
    decode("BZh91AY&SY" + std::string(100, 'x'), 4096);
    ADD_FAILURE() << "bzip2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bzip2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("zstd"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
