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
  for (size_t i = 0; i < values.size(); ++i) {
    const std::byte* at = bytes + i * element;
    if (spec.dtype == at::kInt) {
      int32_t v;
      std::memcpy(&v, at, 4);
      values[i] = v;
    } else if (spec.dtype == at::kLong) {
      std::memcpy(&values[i], at, 8);
    } else if (spec.dtype == at::kByte) {
      values[i] = static_cast<uint8_t>(*at);
    } else if (element == 2 && source.stored() == TokenType::kUInt16) {
      uint16_t v;
      std::memcpy(&v, at, 2);
      values[i] = v;
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
  EXPECT_EQ(source.describe(),
            "megatron(" + dir / "d" + ", " + std::to_string(source.total_tokens()) + " tokens, int32, seq_len=16)");
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

// A flat token file of `tokens` random values stored as T; returns them.
template <typename T>
std::vector<int64_t> write_flat(const std::string& path, std::mt19937_64& rng, size_t tokens) {
  std::vector<T> stored(tokens);
  std::vector<int64_t> values(tokens);
  for (size_t i = 0; i < tokens; ++i) {
    stored[i] = static_cast<T>(rng());
    values[i] = static_cast<int64_t>(stored[i]);
  }
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(stored.data()), static_cast<std::streamsize>(tokens * sizeof(T)));
  return values;
}

// Field `field` of `sample` read back as int64 values (the field's dtype: int32 or int64).
std::vector<int64_t> values_of(const TokenWindowSource& source, const EncodedSample& sample, size_t field) {
  const FieldSpec& spec = source.fields().at(field);
  const at::Tensor tensor = RawDecoder().decode(sample.fields.at(field), spec);
  EXPECT_EQ(tensor.sizes(), at::IntArrayRef(spec.shape));
  const at::Tensor wide = tensor.to(at::kLong);
  const auto* data = wide.data_ptr<int64_t>();
  return {data, data + wide.numel()};
}

TEST(TokenWindowSource, EveryStridedWindowOfAFlatFileInEveryStoredAndOutputType) {
  TempDir dir;
  std::mt19937_64 rng(5);
  struct Case {
    TokenType type;
    std::vector<int64_t> values;
  };
  std::vector<Case> cases;
  const size_t tokens = 1000 + rng() % 500;
  cases.push_back({TokenType::kUInt16, write_flat<uint16_t>(dir / "u16.bin", rng, tokens)});
  cases.push_back({TokenType::kUInt32, write_flat<uint32_t>(dir / "u32.bin", rng, tokens)});
  cases.push_back({TokenType::kInt32, write_flat<int32_t>(dir / "i32.bin", rng, tokens)});
  cases.push_back({TokenType::kUInt8, write_flat<uint8_t>(dir / "u8.bin", rng, tokens)});
  const char* names[] = {"u16.bin", "u32.bin", "i32.bin", "u8.bin"};
  for (size_t c = 0; c < cases.size(); ++c) {
    for (const std::optional<at::ScalarType> output :
         std::vector<std::optional<at::ScalarType>>{at::kLong, at::kInt, std::nullopt}) {
      const int64_t seq_len = 1 + static_cast<int64_t>(rng() % 97);
      TokenWindowOptions options{.seq_len = seq_len, .path = dir / names[c], .type = cases[c].type};
      options.output_dtype = output;
      const TokenWindowSource source(options);
      SCOPED_TRACE(source.describe());
      if (output) {
        EXPECT_EQ(source.fields()[0].dtype, *output);
      }
      ASSERT_EQ(source.size(), (tokens - 1) / static_cast<uint64_t>(seq_len));
      std::vector<int64_t> expected = cases[c].values;
      if (output == at::kInt && cases[c].type == TokenType::kUInt32) {
        for (int64_t& value : expected) value = static_cast<int32_t>(static_cast<uint32_t>(value));
      }
      for (uint64_t i = 0; i < source.size(); ++i) {
        const EncodedSample sample = source.read(i);
        EXPECT_EQ(sample.key, source.key(i));
        EXPECT_EQ(sample.key, dir / names[c] + ":" +
                                  std::to_string(i * static_cast<uint64_t>(seq_len) * token_type_size(cases[c].type)));
        if (source.widens_uint16() || (!output && cases[c].type == TokenType::kUInt16)) continue;
        ASSERT_EQ(values_of(source, sample, 0), slice(expected, i * static_cast<uint64_t>(seq_len), seq_len + 1))
            << "window " << i;
      }
    }
  }
}

TEST(TokenWindowSource, SplitGivesInputsAndTargetsOneTokenApart) {
  TempDir dir;
  std::mt19937_64 rng(6);
  const std::vector<int64_t> values = write_flat<uint16_t>(dir / "t.bin", rng, 5000);
  for (const TokenWindows windows : {TokenWindows::kStrided, TokenWindows::kRandom}) {
    const TokenWindowSource source({.seq_len = 128,
                                    .path = dir / "t.bin",
                                    .windows = windows,
                                    .seed = 3,
                                    .output_dtype = at::kLong,
                                    .split = {"x", "y"}});
    ASSERT_EQ(source.fields().size(), 2u);
    EXPECT_EQ(source.fields()[0].name, "x");
    EXPECT_EQ(source.fields()[1].name, "y");
    EXPECT_EQ(source.fields()[1].shape, (std::vector<int64_t>{128}));
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      for (uint64_t i = 0; i < source.size(); ++i) {
        const EncodedSample sample = source.read_sample(i, {.seed = 3, .epoch = epoch, .index = i});
        const uint64_t first = source.first_token(epoch, i);
        ASSERT_EQ(values_of(source, sample, 0), slice(values, first, 128));
        ASSERT_EQ(values_of(source, sample, 1), slice(values, first + 1, 128));
      }
    }
  }
  EXPECT_THROW(TokenWindowSource({.seq_len = 8, .add_extra_token = false, .path = dir / "t.bin", .split = {"x", "y"}}),
               Error);
  EXPECT_THROW(TokenWindowSource({.seq_len = 8, .path = dir / "t.bin", .split = {"x", "x"}}), Error);
}

TEST(TokenWindowSource, RandomWindowsAreDrawnFromSeedEpochAndIndexAndCoverTheFile) {
  TempDir dir;
  std::mt19937_64 rng(7);
  const std::vector<int64_t> values = write_flat<uint16_t>(dir / "t.bin", rng, 300);
  const TokenWindowOptions options{
      .seq_len = 16, .path = dir / "t.bin", .windows = TokenWindows::kRandom, .samples = 4000, .seed = 11};
  const TokenWindowSource source(options);
  EXPECT_FALSE(source.same_every_epoch());
  EXPECT_EQ(source.size(), 4000u);
  std::vector<int> starts(300, 0);
  size_t moved = 0;
  for (uint64_t i = 0; i < source.size(); ++i) {
    const uint64_t first = source.first_token(0, i);
    ASSERT_LE(first, 300u - 17u);
    ++starts[first];
    EXPECT_EQ(first, TokenWindowSource(options).first_token(0, i));  // the same draw from another instance
    if (source.first_token(1, i) != first) ++moved;
    const EncodedSample sample = source.read_sample(i, {.seed = 11, .epoch = 0, .index = i});
    EXPECT_EQ(sample.key, dir / "t.bin:" + std::to_string(first * 2));
    ASSERT_EQ(values_of(source, sample, 0), slice(values, first, 17));
  }
  // Every one of the 284 starts, the first and the last among them, is drawn (4000 draws: each is
  // missed with probability (283/284)^4000 ~ 1e-6).
  for (size_t first = 0; first <= 300 - 17; ++first) EXPECT_GT(starts[first], 0) << first;
  EXPECT_GT(moved, 3900u);  // another epoch, other windows
  TokenWindowOptions reseeded = options;
  reseeded.seed = 12;
  EXPECT_NE(TokenWindowSource(reseeded).first_token(0, 0) + TokenWindowSource(reseeded).first_token(0, 1),
            source.first_token(0, 0) + source.first_token(0, 1));
}

TEST(TokenWindowSource, FilesOfMoreThan2To31TokensAreReadToTheirEnd) {
  // A sparse file of 2^31 + 4096 uint16 tokens (4 GiB on paper, a few pages on disk): zeros, then
  // known tokens in the last 4096.
  TempDir dir;
  const std::string path = dir / "big.bin";
  const uint64_t total = (uint64_t{1} << 31) + 4096;
  std::vector<uint16_t> tail(4096);
  for (size_t i = 0; i < tail.size(); ++i) tail[i] = static_cast<uint16_t>(i * 7 + 1);
  {
    std::ofstream out(path, std::ios::binary);
    out.seekp(static_cast<std::streamoff>((total - tail.size()) * 2));
    out.write(reinterpret_cast<const char*>(tail.data()), static_cast<std::streamsize>(tail.size() * 2));
    ASSERT_TRUE(out.good());
  }
  const TokenWindowSource source({.seq_len = 1024, .path = path, .output_dtype = at::kLong});
  EXPECT_EQ(source.total_tokens(), total);
  EXPECT_EQ(source.size(), (total - 1) / 1024);
  const uint64_t last = source.size() - 1;
  const uint64_t first = last * 1024;
  const std::vector<int64_t> window = values_of(source, source.read(last), 0);
  for (uint64_t t = 0; t < 1025; ++t) {
    const uint64_t at = first + t;
    const int64_t expected = at < total - tail.size() ? 0 : tail[at - (total - tail.size())];
    ASSERT_EQ(window[t], expected) << "token " << at;
  }
  EXPECT_EQ(source.key(last), path + ":" + std::to_string(first * 2));

  const TokenWindowSource random(
      {.seq_len = 1024, .path = path, .windows = TokenWindows::kRandom, .samples = 100000, .seed = 1});
  uint64_t highest = 0;
  for (uint64_t i = 0; i < random.size(); ++i) highest = std::max(highest, random.first_token(0, i));
  EXPECT_GT(highest, total - total / 1000);  // starts are drawn over all of it, not over 31 bits
}

TEST(TokenWindowSource, RefusesAFileThatIsNotAWholeNumberOfTokens) {
  TempDir dir;
  std::ofstream(dir / "odd.bin", std::ios::binary).write("abcdefg", 7);
  try {
    const TokenWindowSource source({.seq_len = 1, .path = dir / "odd.bin", .type = TokenType::kUInt16});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(dir / "odd.bin"), std::string::npos) << what;
    EXPECT_NE(what.find("7 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("byte offset 6"), std::string::npos) << what;
  }
  EXPECT_EQ(TokenWindowSource({.seq_len = 1, .path = dir / "odd.bin", .type = TokenType::kUInt8}).size(), 6u);
  EXPECT_THROW(TokenWindowSource({.seq_len = 1, .path = dir / "missing.bin"}), Error);
}

}  // namespace
}  // namespace ferry
