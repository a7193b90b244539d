// TokenWindowSource: GPT-style windows over a Megatron-LM indexed dataset, compared token by token
// with the concatenated stream that was written.
#include <ferry/io/formats/token_window_source.h>

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/io/decoders/raw_decoder.h>
#include <ferry/io/formats/indexed_dataset_writer.h>
#include <ferry/pipeline/error.h>
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

// A fresh folder for one test's files, removed at the end.
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("ferry_token_window_test") {}
};

// Writes `documents` (one sequence each) and returns their concatenation.
std::vector<int64_t> write(const std::string& prefix, IndexedDtype dtype,
                           const std::vector<std::vector<int64_t>>& documents) {
  IndexedDatasetWriter writer(prefix, dtype);
  std::vector<int64_t> stream;
  for (const auto& document : documents) {
    writer.add_document(document);
    stream.insert(stream.end(), document.begin(), document.end());
  }
  writer.finalize();
  return stream;
}

// Random documents (some empty) of tokens over [0, high].
std::vector<std::vector<int64_t>> random_documents(std::mt19937_64& rng, int count, int64_t high, size_t longest) {
  std::uniform_int_distribution<int64_t> value(0, high);
  std::vector<std::vector<int64_t>> documents(static_cast<size_t>(count));
  for (auto& document : documents) {
    document.resize(rng() % 8 == 0 ? 0 : 1 + rng() % longest);
    for (int64_t& token : document) token = rng() % 16 == 0 ? high : value(rng);
  }
  return documents;
}

// A sample's tokens as the pipeline sees them: decoded by the "raw" decoder, then read as the
// field's dtype (int32, or uint16 when kept; see Note [uint16 tokens]).
std::vector<int64_t> decoded_tokens(const TokenWindowSource& source, const EncodedSample& sample) {
  const FieldSpec& spec = source.fields().at(0);
  const at::Tensor tensor = RawDecoder().decode(sample.fields.at(0), spec);
  EXPECT_EQ(tensor.scalar_type(), spec.dtype);
  EXPECT_EQ(tensor.sizes(), at::IntArrayRef(spec.shape));
  const auto* bytes = static_cast<const std::byte*>(tensor.data_ptr());
  const size_t element = c10::elementSize(spec.dtype);
  std::vector<int64_t> values(static_cast<size_t>(tensor.numel()));
  const IndexedDtype on_disk = source.dataset().dtype();
  for (size_t i = 0; i < values.size(); ++i) {
    const std::byte* at = bytes + i * element;
    if (source.widens_uint16() || on_disk == IndexedDtype::kInt32) {
      int32_t v;
      std::memcpy(&v, at, 4);
      values[i] = v;
    } else if (on_disk == IndexedDtype::kUInt16) {
      uint16_t v;
      std::memcpy(&v, at, 2);
      values[i] = v;
    } else if (on_disk == IndexedDtype::kInt64) {
      std::memcpy(&values[i], at, 8);
    } else if (on_disk == IndexedDtype::kUInt8) {
      values[i] = static_cast<uint8_t>(*at);
    } else {
      ADD_FAILURE() << "dtype not handled by this test";
    }
  }
  return values;
}

std::vector<int64_t> slice(const std::vector<int64_t>& stream, uint64_t first, uint64_t count) {
  return {stream.begin() + static_cast<std::ptrdiff_t>(first),
          stream.begin() + static_cast<std::ptrdiff_t>(first + count)};
}

TEST(TokenWindowSource, WindowsMatchTheConcatenatedStreamForRandomSeqLen) {
  for (const IndexedDtype dtype :
       {IndexedDtype::kUInt16, IndexedDtype::kInt32, IndexedDtype::kInt64, IndexedDtype::kUInt8}) {
    std::mt19937_64 rng(100 + static_cast<uint64_t>(dtype));
    const int64_t high = dtype == IndexedDtype::kUInt8 ? 255 : dtype == IndexedDtype::kUInt16 ? 65535 : 1'000'000'007;
    const auto documents = random_documents(rng, 150, high, 200);
    TempDir dir;
    const std::vector<int64_t> stream = write(dir / "d", dtype, documents);
    for (int trial = 0; trial < 8; ++trial) {
      const int64_t seq_len = trial == 0 ? 1 : 1 + static_cast<int64_t>(rng() % 700);
      const bool extra = trial % 2 == 0;
      SCOPED_TRACE(std::string(indexed_dtype_name(dtype)) + " seq_len " + std::to_string(seq_len) +
                   (extra ? " +1" : ""));
      const TokenWindowSource source({dir / "d", seq_len, extra});
      const uint64_t window = static_cast<uint64_t>(seq_len) + (extra ? 1 : 0);
      ASSERT_EQ(source.size(), (stream.size() - (extra ? 1 : 0)) / static_cast<uint64_t>(seq_len));
      ASSERT_EQ(source.window(), static_cast<int64_t>(window));
      for (uint64_t i = 0; i < source.size(); i += 1 + rng() % 3) {
        const EncodedSample sample = source.read(i);
        const uint64_t first = i * static_cast<uint64_t>(seq_len);
        ASSERT_LE(first + window, stream.size());
        EXPECT_EQ(sample.index, i);
        EXPECT_EQ(sample.key, dir / "d.bin:" + std::to_string(first * indexed_dtype_size(dtype)));
        ASSERT_EQ(decoded_tokens(source, sample), slice(stream, first, window)) << "sample " << i;
      }
      // The last whole window is there; the next, partial one is not.
      const uint64_t last = source.size() - 1;
      EXPECT_EQ(decoded_tokens(source, source.read(last)),
                slice(stream, last * static_cast<uint64_t>(seq_len), window));
      EXPECT_GT(source.size() * static_cast<uint64_t>(seq_len) + window, stream.size());
      EXPECT_THROW(source.read(source.size()), Error);
    }
  }
}

TEST(TokenWindowSource, WindowsRunAcrossDocumentBoundariesAndShareOneToken) {
  TempDir dir;
  write(dir / "d", IndexedDtype::kInt32, {{1, 2, 3}, {}, {4, 5}, {6, 7, 8, 9}, {10}});
  const TokenWindowSource source({dir / "d", 3, true});
  ASSERT_EQ(source.size(), 3u);  // (10 - 1) / 3
  EXPECT_EQ(decoded_tokens(source, source.read(0)), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(decoded_tokens(source, source.read(1)), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(decoded_tokens(source, source.read(2)), (std::vector<int64_t>{7, 8, 9, 10}));
  EXPECT_EQ(source.read(2).key, dir / "d.bin:24");

  const TokenWindowSource plain({dir / "d", 3, false});
  ASSERT_EQ(plain.size(), 3u);  // 10 / 3: token 10 is left over
  EXPECT_EQ(decoded_tokens(plain, plain.read(1)), (std::vector<int64_t>{4, 5, 6}));
  EXPECT_EQ(decoded_tokens(plain, plain.read(2)), (std::vector<int64_t>{7, 8, 9}));
}

TEST(TokenWindowSource, TheLastPartialWindowIsExcluded) {
  for (const int64_t tokens : {8, 9, 10, 11}) {
    std::vector<int64_t> document(static_cast<size_t>(tokens));
    for (int64_t i = 0; i < tokens; ++i) document[static_cast<size_t>(i)] = i + 1;
    TempDir dir;
    write(dir / "d", IndexedDtype::kUInt16, {document});
    const TokenWindowSource with_extra({dir / "d", 4, true});
    EXPECT_EQ(with_extra.size(), static_cast<uint64_t>((tokens - 1) / 4)) << tokens << " tokens";
    const TokenWindowSource without({dir / "d", 4, false});
    EXPECT_EQ(without.size(), static_cast<uint64_t>(tokens / 4)) << tokens << " tokens";
    const uint64_t last = with_extra.size() - 1;
    EXPECT_EQ(decoded_tokens(with_extra, with_extra.read(last)).back(), static_cast<int64_t>(last * 4 + 5));
  }
}

TEST(TokenWindowSource, Uint16TokensAbove32767KeepTheirValues) {
  TempDir dir;
  const std::vector<int64_t> document{0, 1, 32767, 32768, 40000, 65534, 65535, 7, 65535};
  write(dir / "d", IndexedDtype::kUInt16, {document});
  const TokenWindowSource source({dir / "d", 8, true});
  ASSERT_EQ(source.size(), 1u);
  EXPECT_EQ(decoded_tokens(source, source.read(0)), document);
  const FieldSpec& spec = source.fields()[0];
  // Kept 2 bytes wide where libtorch has a uint16 type, widened to int32 where it has none.
  if (source.widens_uint16()) {
    EXPECT_EQ(spec.dtype, at::kInt);
    EXPECT_EQ(source.read(0).fields[0].numel(), 9 * 4);
    EXPECT_NE(source.describe().find("uint16 as int32"), std::string::npos) << source.describe();
  } else {
    EXPECT_EQ(c10::elementSize(spec.dtype), 2u);
    EXPECT_EQ(source.read(0).fields[0].numel(), 9 * 2);
  }
}

TEST(TokenWindowSource, OneFieldOfTheWindowsShapeDecodedRaw) {
  TempDir dir;
  std::mt19937_64 rng(9);
  write(dir / "d", IndexedDtype::kInt32, random_documents(rng, 20, 50000, 100));
  const TokenWindowSource source({dir / "d", 16, true});
  ASSERT_EQ(source.fields().size(), 1u);
  const FieldSpec& spec = source.fields()[0];
  EXPECT_EQ(spec.name, "tokens");
  EXPECT_EQ(spec.dtype, at::kInt);
  EXPECT_EQ(spec.shape, (std::vector<int64_t>{17}));
  EXPECT_FALSE(spec.variable());
  EXPECT_EQ(spec.decoder, "raw");
  const EncodedSample sample = source.read(0);
  ASSERT_EQ(sample.fields.size(), 1u);
  EXPECT_EQ(sample.fields[0].scalar_type(), at::kByte);
  EXPECT_EQ(sample.fields[0].dim(), 1);
  EXPECT_EQ(sample.fields[0].numel(), 17 * 4);
  EXPECT_EQ(source.describe(), "megatron(" + dir / "d" + ", " + std::to_string(source.dataset().total_tokens()) +
                                   " tokens, int32, seq_len=16)");
}

TEST(TokenWindowSource, ConcurrentReadsMatchSerialReads) {
  TempDir dir;
  std::mt19937_64 rng(21);
  const std::vector<int64_t> stream = write(dir / "d", IndexedDtype::kUInt16, random_documents(rng, 400, 65535, 300));
  const TokenWindowSource source({dir / "d", 64, true});
  ASSERT_GT(source.size(), 100u);
  for (const int threads : {1, 2, 4, 8}) {
    std::atomic<int> mismatches{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937_64 local(static_cast<uint64_t>(t) * 7 + 1);
        for (int i = 0; i < 500; ++i) {
          const uint64_t index = local() % source.size();
          if (decoded_tokens(source, source.read(index)) != slice(stream, index * 64, 65)) ++mismatches;
        }
      });
    }
    for (auto& worker : workers) worker.join();
    EXPECT_EQ(mismatches.load(), 0) << threads << " threads";
  }
}

TEST(TokenWindowSource, RefusesBadOptionsTooFewTokensAndFloatDatasets) {
  TempDir dir;
  write(dir / "d", IndexedDtype::kInt32, {{1, 2, 3, 4, 5}});
  EXPECT_THROW(TokenWindowSource({"", 4, true}), Error);
  EXPECT_THROW(TokenWindowSource({dir / "d", 0, true}), Error);
  EXPECT_THROW(TokenWindowSource({dir / "d", -3, true}), Error);
  EXPECT_THROW(TokenWindowSource({dir / "d", 5, true}), Error);  // 5 tokens, a window of 6
  EXPECT_THROW(TokenWindowSource({dir / "d", std::numeric_limits<int64_t>::max(), true}), Error);
  EXPECT_EQ(TokenWindowSource({dir / "d", 5, false}).size(), 1u);
  EXPECT_EQ(TokenWindowSource({dir / "d", 4, true}).size(), 1u);
  try {
    const TokenWindowSource source({dir / "missing", 4, true});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "missing.idx"), std::string::npos) << e.what();
  }

  // float32 has int32's width: only the code in byte 17 changes.
  std::fstream idx(dir / "d.idx", std::ios::in | std::ios::out | std::ios::binary);
  idx.seekp(17);
  idx.put(7);
  idx.close();
  try {
    const TokenWindowSource source({dir / "d", 2, true});
    FAIL() << "a float32 dataset was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "d.idx at byte offset 17"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
