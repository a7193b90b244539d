// IndexedDataset and IndexedDatasetWriter: Megatron-LM's MMIDIDX format, written and read back,
// checked against an independent numpy writer (write_megatron_index.py), and every malformed file
// refused with an error that names the file and the byte offset.
#include <ferry/io/formats/indexed_dataset.h>

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/io/formats/indexed_dataset_writer.h>
#include <ferry/pipeline/error.h>
#include "tests/support/temp_dir.h"

extern char** environ;

namespace ferry {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

// A fresh folder for one test's files, removed at the end.
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("ferry_megatron_test") {}
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// A document: its sequences' tokens.
using Document = std::vector<std::vector<int64_t>>;

int64_t low_of(IndexedDtype dtype) {
  switch (dtype) {
    case IndexedDtype::kUInt8:
    case IndexedDtype::kUInt16: return 0;
    case IndexedDtype::kInt8: return std::numeric_limits<int8_t>::min();
    case IndexedDtype::kInt16: return std::numeric_limits<int16_t>::min();
    case IndexedDtype::kInt32: return std::numeric_limits<int32_t>::min();
    default: return std::numeric_limits<int64_t>::min();
  }
}

int64_t high_of(IndexedDtype dtype) {
  switch (dtype) {
    case IndexedDtype::kUInt8: return 255;
    case IndexedDtype::kUInt16: return 65535;
    case IndexedDtype::kInt8: return std::numeric_limits<int8_t>::max();
    case IndexedDtype::kInt16: return std::numeric_limits<int16_t>::max();
    case IndexedDtype::kInt32: return std::numeric_limits<int32_t>::max();
    default: return std::numeric_limits<int64_t>::max();
  }
}

// Random documents: some empty, some of several sequences (some of length 0), values over the
// dtype's whole range with its extremes mixed in.
std::vector<Document> random_documents(std::mt19937_64& rng, IndexedDtype dtype, int count) {
  std::uniform_int_distribution<int64_t> value(low_of(dtype), high_of(dtype));
  std::vector<Document> documents(static_cast<size_t>(count));
  for (Document& document : documents) {
    const auto kind = rng() % 10;
    if (kind == 0) continue;  // empty: no sequence
    const size_t sequences = kind == 1 ? 1 + rng() % 4 : 1;
    for (size_t s = 0; s < sequences; ++s) {
      std::vector<int64_t> tokens(rng() % 6 == 0 ? 0 : 1 + rng() % 300);
      for (int64_t& token : tokens) {
        const auto pick = rng() % 20;
        token = pick == 0 ? low_of(dtype) : pick == 1 ? high_of(dtype) : value(rng);
      }
      document.push_back(std::move(tokens));
    }
  }
  return documents;
}

void write_dataset(const std::string& prefix, IndexedDtype dtype, const std::vector<Document>& documents) {
  IndexedDatasetWriter writer(prefix, dtype);
  for (const Document& document : documents) {
    if (document.size() == 1 && !document[0].empty()) {
      writer.add_document(document[0]);  // the common case: one sequence
    } else {                             // no sequence, several, or one of length 0
      std::vector<int64_t> tokens;
      std::vector<int64_t> lengths;
      for (const auto& sequence : document) {
        tokens.insert(tokens.end(), sequence.begin(), sequence.end());
        lengths.push_back(static_cast<int64_t>(sequence.size()));
      }
      writer.add_document(tokens, lengths);
    }
  }
  writer.finalize();
}

template <typename T>
std::vector<int64_t> widen(std::span<const T> tokens) {
  return std::vector<int64_t>(tokens.begin(), tokens.end());
}

std::vector<int64_t> sequence_values(const IndexedDataset& dataset, uint64_t i) {
  switch (dataset.dtype()) {
    case IndexedDtype::kUInt8: return widen(dataset.sequence<uint8_t>(i));
    case IndexedDtype::kInt8: return widen(dataset.sequence<int8_t>(i));
    case IndexedDtype::kInt16: return widen(dataset.sequence<int16_t>(i));
    case IndexedDtype::kUInt16: return widen(dataset.sequence<uint16_t>(i));
    case IndexedDtype::kInt32: return widen(dataset.sequence<int32_t>(i));
    case IndexedDtype::kInt64: return widen(dataset.sequence<int64_t>(i));
    default: ADD_FAILURE() << "not an integer dataset"; return {};
  }
}

// Everything the reader says about `documents`, checked.
void expect_holds(const IndexedDataset& dataset, IndexedDtype dtype, const std::vector<Document>& documents) {
  EXPECT_EQ(dataset.dtype(), dtype);
  EXPECT_EQ(dataset.itemsize(), indexed_dtype_size(dtype));
  ASSERT_EQ(dataset.document_count(), documents.size());
  uint64_t sequence = 0;
  uint64_t token = 0;
  for (size_t d = 0; d < documents.size(); ++d) {
    const auto [first, last] = dataset.document_sequences(d);
    EXPECT_EQ(first, sequence) << "document " << d;
    EXPECT_EQ(last - first, documents[d].size()) << "document " << d;
    const auto [first_token, last_token] = dataset.document_tokens(d);
    EXPECT_EQ(first_token, token) << "document " << d;
    for (const auto& expected : documents[d]) {
      ASSERT_LT(sequence, dataset.sequence_count());
      EXPECT_EQ(dataset.sequence_length(sequence), static_cast<int64_t>(expected.size()));
      EXPECT_EQ(dataset.sequence_pointer(sequence), token * dataset.itemsize());
      EXPECT_EQ(sequence_values(dataset, sequence), expected) << "sequence " << sequence;
      ++sequence;
      token += expected.size();
    }
    EXPECT_EQ(last_token, token) << "document " << d;
  }
  EXPECT_EQ(dataset.sequence_count(), sequence);
  EXPECT_EQ(dataset.total_tokens(), token);
  EXPECT_FALSE(dataset.has_sequence_modes());
}

std::vector<IndexedDtype> integer_dtypes() {
  return {IndexedDtype::kUInt8,  IndexedDtype::kInt8,  IndexedDtype::kInt16,
          IndexedDtype::kUInt16, IndexedDtype::kInt32, IndexedDtype::kInt64};
}

TEST(IndexedDataset, RoundTripsRandomDocumentsForEveryIntegerDtype) {
  for (const uint64_t seed : {1u, 2u, 3u}) {
    for (const IndexedDtype dtype : integer_dtypes()) {
      SCOPED_TRACE(std::string(indexed_dtype_name(dtype)) + " seed " + std::to_string(seed));
      std::mt19937_64 rng(seed * 31 + static_cast<uint64_t>(dtype));
      const auto documents = random_documents(rng, dtype, 1 + static_cast<int>(rng() % 200));
      TempDir dir;
      write_dataset(dir / "d", dtype, documents);
      const IndexedDataset dataset(dir / "d");
      EXPECT_EQ(dataset.idx_path(), dir / "d.idx");
      EXPECT_EQ(dataset.bin_path(), dir / "d.bin");
      expect_holds(dataset, dtype, documents);
    }
  }
}

TEST(IndexedDataset, TokenBytesOfAnyRangeAreTheConcatenatedStream) {
  std::mt19937_64 rng(17);
  const auto documents = random_documents(rng, IndexedDtype::kInt32, 60);
  std::vector<int32_t> stream;
  for (const auto& document : documents) {
    for (const auto& sequence : document) stream.insert(stream.end(), sequence.begin(), sequence.end());
  }
  TempDir dir;
  write_dataset(dir / "d", IndexedDtype::kInt32, documents);
  const IndexedDataset dataset(dir / "d");
  ASSERT_EQ(dataset.total_tokens(), stream.size());
  for (int trial = 0; trial < 200; ++trial) {
    const uint64_t first = rng() % (stream.size() + 1);
    const uint64_t count = rng() % (stream.size() - first + 1);
    const auto bytes = dataset.token_bytes(first, count);
    ASSERT_EQ(bytes.size(), count * 4);
    ASSERT_EQ(count == 0 ? 0 : std::memcmp(bytes.data(), stream.data() + first, bytes.size()), 0)
        << "[" << first << ", +" << count << ")";
  }
  EXPECT_THROW(dataset.token_bytes(stream.size() - 1, 2), Error);
  EXPECT_THROW(dataset.token_bytes(std::numeric_limits<uint64_t>::max(), 1), Error);
}

TEST(IndexedDataset, AnEmptyDatasetHasNoSequencesAndAnEmptyBin) {
  TempDir dir;
  {
    IndexedDatasetWriter writer(dir / "e", IndexedDtype::kUInt16);
    writer.finalize();
  }
  EXPECT_EQ(slurp(dir / "e.bin").size(), 0u);
  EXPECT_EQ(slurp(dir / "e.idx").size(), IndexedDataset::kHeaderBytes + 8);
  const IndexedDataset dataset(dir / "e");
  EXPECT_EQ(dataset.sequence_count(), 0u);
  EXPECT_EQ(dataset.document_count(), 0u);
  EXPECT_EQ(dataset.total_tokens(), 0u);
}

TEST(IndexedDataset, AccessorsRefuseOutOfRangeIndicesAndTheWrongType) {
  TempDir dir;
  write_dataset(dir / "d", IndexedDtype::kUInt16, {{{1, 2, 3}}, {{4}}});
  const IndexedDataset dataset(dir / "d");
  EXPECT_THROW(dataset.sequence_length(2), Error);
  EXPECT_THROW(dataset.sequence_pointer(2), Error);
  EXPECT_THROW(dataset.sequence_bytes(2), Error);
  EXPECT_THROW(dataset.document_sequences(2), Error);
  EXPECT_THROW(dataset.document_index(3), Error);
  EXPECT_THROW(dataset.sequence_mode(0), Error);
  EXPECT_THROW(dataset.sequence<int16_t>(0), Error);  // same width, wrong type
  EXPECT_THROW(dataset.sequence<int32_t>(0), Error);
  EXPECT_EQ(widen(dataset.sequence<uint16_t>(1)), std::vector<int64_t>{4});
}

TEST(IndexedDataset, ConcurrentReadsFromManyThreadsSeeTheSameTokens) {
  std::mt19937_64 rng(5);
  const auto documents = random_documents(rng, IndexedDtype::kUInt16, 300);
  std::vector<std::vector<int64_t>> sequences;
  for (const auto& document : documents) sequences.insert(sequences.end(), document.begin(), document.end());
  TempDir dir;
  write_dataset(dir / "d", IndexedDtype::kUInt16, documents);
  const IndexedDataset dataset(dir / "d");
  ASSERT_EQ(dataset.sequence_count(), sequences.size());
  for (const int threads : {1, 2, 4, 8}) {
    std::atomic<int> mismatches{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937_64 local(static_cast<uint64_t>(t) + 100);
        for (int i = 0; i < 2000; ++i) {
          const uint64_t s = local() % sequences.size();
          if (widen(dataset.sequence<uint16_t>(s)) != sequences[s]) ++mismatches;
        }
      });
    }
    for (auto& worker : workers) worker.join();
    EXPECT_EQ(mismatches.load(), 0) << threads << " threads";
  }
}

// ---- the writer ------------------------------------------------------------------------------------

TEST(IndexedDatasetWriter, RefusesTokensThatDoNotFitAndLengthsThatDoNotAddUp) {
  TempDir dir;
  IndexedDatasetWriter writer(dir / "w", IndexedDtype::kUInt16);
  const std::vector<int64_t> too_big{1, 65536};
  try {
    writer.add_document(too_big);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "w.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("65536 at position 1"), std::string::npos) << e.what();
  }
  const std::vector<int64_t> negative{-1};
  EXPECT_THROW(writer.add_document(negative), Error);
  const std::vector<int64_t> tokens{1, 2, 3};
  const std::vector<int64_t> lengths{1, 1};
  EXPECT_THROW(writer.add_document(tokens, lengths), Error);
  // Nothing of the refused documents was written.
  EXPECT_EQ(writer.token_count(), 0u);
  EXPECT_EQ(writer.document_count(), 0u);
  writer.add_document(tokens);
  writer.finalize();
  EXPECT_THROW(writer.finalize(), Error);
  EXPECT_THROW(writer.add_document(tokens), Error);
  EXPECT_EQ(IndexedDataset(dir / "w").total_tokens(), 3u);
}

TEST(IndexedDatasetWriter, RefusesFloatDtypesAndNamesAFileItCannotCreate) {
  TempDir dir;
  EXPECT_THROW(IndexedDatasetWriter(dir / "f", IndexedDtype::kFloat32), Error);
  try {
    IndexedDatasetWriter writer(dir / "missing/x", IndexedDtype::kInt32);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "missing/x.bin"), std::string::npos) << e.what();
  }
}

TEST(IndexedDatasetWriter, WithoutFinalizeLeavesTheOldDatasetWholeAndNoPartialFiles) {
  TempDir dir;
  write_dataset(dir / "s", IndexedDtype::kInt32, {{{1, 2}}});
  {
    // A run reading the old dataset meanwhile keeps reading it: it is replaced only by renames.
    const IndexedDataset reading(dir / "s");
    IndexedDatasetWriter writer(dir / "s", IndexedDtype::kInt32);
    const std::vector<int64_t> tokens{7, 8, 9};
    writer.add_document(tokens);
    EXPECT_EQ(reading.sequence<int32_t>(0)[1], 2);
  }
  EXPECT_FALSE(exists(dir / "s.bin.partial"));
  EXPECT_FALSE(exists(dir / "s.idx.partial"));
  EXPECT_EQ(IndexedDataset(dir / "s").total_tokens(), 2u) << "the unfinished writer left the old dataset as it was";
  {
    IndexedDatasetWriter writer(dir / "s", IndexedDtype::kInt32);
    const std::vector<int64_t> tokens{7, 8, 9};
    writer.add_document(tokens);
    writer.finalize();
  }
  EXPECT_EQ(IndexedDataset(dir / "s").total_tokens(), 3u);
  EXPECT_FALSE(exists(dir / "s.bin.partial"));
}

// ---- against an independent writer (numpy, as Megatron's _IndexWriter) ------------------------------

// Runs argv with stdout and stderr into `log`; returns the exit status (-1: not run or killed).
int run_program(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string spec_json(IndexedDtype dtype, const std::vector<Document>& documents, const std::vector<int>& modes) {
  std::ostringstream out;
  out << "{\"dtype\": \"" << indexed_dtype_name(dtype) << "\", \"documents\": [";
  for (size_t d = 0; d < documents.size(); ++d) {
    out << (d ? ", " : "") << "[";
    for (size_t s = 0; s < documents[d].size(); ++s) {
      out << (s ? ", " : "") << "[";
      for (size_t t = 0; t < documents[d][s].size(); ++t) out << (t ? "," : "") << documents[d][s][t];
      out << "]";
    }
    out << "]";
  }
  out << "], \"modes\": ";
  if (modes.empty()) {
    out << "null";
  } else {
    out << "[";
    for (size_t i = 0; i < modes.size(); ++i) out << (i ? ", " : "") << modes[i];
    out << "]";
  }
  out << "}";
  return out.str();
}

// Skips (visibly) without /usr/bin/python3 or numpy; else writes `documents` at `prefix` with it.
#define FERRY_WRITE_WITH_NUMPY(dir, prefix, dtype, documents, modes)                                                   \
  do {                                                                                                                 \
    if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " not found: the numpy writer needs it";              \
    if (run_program({kPython, "-c", "import numpy"}, (dir) / "numpy.log") != 0) {                                      \
      GTEST_SKIP() << "numpy is not importable by " << kPython << ": " << slurp((dir) / "numpy.log");                  \
    }                                                                                                                  \
    spit((dir) / "spec.json", spec_json((dtype), (documents), (modes)));                                               \
    ASSERT_EQ(run_program({kPython, FERRY_SOURCE_DIR "/tests/io/formats/write_megatron_index.py", (dir) / "spec.json", \
                           (prefix)},                                                                                  \
                          (dir) / "python.log"),                                                                       \
              0)                                                                                                       \
        << slurp((dir) / "python.log");                                                                                \
  } while (false)

TEST(IndexedDataset, ReadsWhatNumpyWritesAsMegatronDoesAndTheWriterMatchesItByteForByte) {
  for (const IndexedDtype dtype : {IndexedDtype::kUInt16, IndexedDtype::kInt32, IndexedDtype::kInt64}) {
    SCOPED_TRACE(std::string(indexed_dtype_name(dtype)));
    std::mt19937_64 rng(40 + static_cast<uint64_t>(dtype));
    const auto documents = random_documents(rng, dtype, 80);
    TempDir dir;
    FERRY_WRITE_WITH_NUMPY(dir, dir / "py", dtype, documents, std::vector<int>{});
    const IndexedDataset dataset(dir / "py");
    expect_holds(dataset, dtype, documents);

    write_dataset(dir / "cc", dtype, documents);
    EXPECT_TRUE(slurp(dir / "cc.idx") == slurp(dir / "py.idx")) << "the .idx differs from numpy's";
    EXPECT_TRUE(slurp(dir / "cc.bin") == slurp(dir / "py.bin")) << "the .bin differs from numpy's";
  }
}

TEST(IndexedDataset, ReadsTheSequenceModesOfAMultimodalIndex) {
  const std::vector<Document> documents{{{1, 2}, {3}}, {}, {{4, 5, 6}}};
  const std::vector<int> modes{0, 1, -3};
  TempDir dir;
  FERRY_WRITE_WITH_NUMPY(dir, dir / "mm", IndexedDtype::kInt32, documents, modes);
  const IndexedDataset dataset(dir / "mm");
  ASSERT_TRUE(dataset.has_sequence_modes());
  for (uint64_t i = 0; i < modes.size(); ++i) EXPECT_EQ(dataset.sequence_mode(i), modes[i]);
  EXPECT_EQ(dataset.document_count(), 3u);
  EXPECT_EQ(dataset.document_sequences(1), (std::pair<uint64_t, uint64_t>{2, 2}));
  EXPECT_EQ(widen(dataset.sequence<int32_t>(2)), (std::vector<int64_t>{4, 5, 6}));
}

// ---- malformed files ---------------------------------------------------------------------------------

// A good dataset to break: int32, 4 documents (two of them empty), 3 sequences: [1 2 3] [4] | | [5..10] |.
// Document indices 0, 2, 2, 3, 3. The .idx is 34 + 12 * 3 + 8 * 5 = 110 bytes, the .bin 4 * 10 = 40.
constexpr uint64_t kSequences = 3;
constexpr uint64_t length_at(uint64_t i) { return 34 + 4 * i; }
constexpr uint64_t pointer_at(uint64_t i) { return 34 + 4 * kSequences + 8 * i; }
constexpr uint64_t document_index_at(uint64_t j) { return 34 + 12 * kSequences + 8 * j; }
constexpr uint64_t kIdxBytes = 110;
constexpr uint64_t kBinBytes = 40;

struct Broken {
  TempDir dir;
  std::string prefix = dir / "b";
  std::string idx = prefix + ".idx";
  std::string bin = prefix + ".bin";
  Broken() { write_dataset(prefix, IndexedDtype::kInt32, {{{1, 2, 3}, {4}}, {}, {{5, 6, 7, 8, 9, 10}}, {}}); }

  template <typename T>
  void patch(const std::string& path, size_t offset, T value) {
    std::string bytes = slurp(path);
    ASSERT_LE(offset + sizeof(T), bytes.size());
    std::memcpy(bytes.data() + offset, &value, sizeof(T));
    spit(path, bytes);
  }
  void resize(const std::string& path, size_t bytes) {
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(bytes)), 0);
  }
  void append(const std::string& path, size_t bytes) {
    std::string all = slurp(path);
    all.append(bytes, '\x5a');
    spit(path, all);
  }

  // Opens the dataset, expecting an Error whose message names `file`, "byte offset <offset>" and `words`.
  void expect_error(const std::string& file, uint64_t offset, const std::string& words) {
    try {
      const IndexedDataset dataset(prefix);
      ADD_FAILURE() << "opened without an error";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(file), std::string::npos) << message;
      EXPECT_NE(message.find("byte offset " + std::to_string(offset) + ":"), std::string::npos) << message;
      EXPECT_NE(message.find(words), std::string::npos) << message;
    }
  }
};

TEST(IndexedDatasetMalformed, TheGoodFileOpens) {
  Broken b;
  ASSERT_EQ(slurp(b.idx).size(), kIdxBytes);
  ASSERT_EQ(slurp(b.bin).size(), kBinBytes);
  const IndexedDataset dataset(b.prefix);
  EXPECT_EQ(dataset.sequence_count(), kSequences);  // the empty documents have no sequence
  EXPECT_EQ(dataset.document_count(), 4u);
  EXPECT_EQ(dataset.pointers_offset(), pointer_at(0));
  EXPECT_EQ(dataset.document_indices_offset(), document_index_at(0));
  EXPECT_EQ(dataset.document_sequences(1), (std::pair<uint64_t, uint64_t>{2, 2}));
  EXPECT_EQ(dataset.document_tokens(2), (std::pair<uint64_t, uint64_t>{4, 10}));
}

TEST(IndexedDatasetMalformed, MissingFilesAreNamed) {
  Broken b;
  ASSERT_EQ(::unlink(b.bin.c_str()), 0);
  try {
    const IndexedDataset dataset(b.prefix);
    ADD_FAILURE() << "opened without a .bin";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open " + b.bin), std::string::npos) << e.what();
  }
  try {
    const IndexedDataset dataset(b.prefix + ".idx");  // the common slip: a file name for the prefix
    ADD_FAILURE() << "opened a prefix that names no dataset";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(b.idx + ".idx"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("give it without"), std::string::npos) << e.what();
  }
}

TEST(IndexedDatasetMalformed, BadMagic) {
  Broken b;
  b.patch<char>(b.idx, 2, 'X');
  b.expect_error(b.idx, 0, "bad magic");
}

TEST(IndexedDatasetMalformed, TheOlderFairseqIndexIsNamed) {
  Broken b;
  spit(b.idx, std::string("TNTIDX\0\0", 8) + std::string(40, '\0'));
  b.expect_error(b.idx, 0, "lazy");
}

TEST(IndexedDatasetMalformed, EmptyIndex) {
  Broken b;
  b.resize(b.idx, 0);
  b.expect_error(b.idx, 0, "bad magic");
}

TEST(IndexedDatasetMalformed, UnsupportedVersion) {
  Broken b;
  b.patch<uint64_t>(b.idx, 9, 2);
  b.expect_error(b.idx, 9, "unsupported version 2");
}

TEST(IndexedDatasetMalformed, UnknownDtypeCodes) {
  for (const uint8_t code : {uint8_t{0}, uint8_t{9}, uint8_t{255}}) {
    Broken b;
    b.patch<uint8_t>(b.idx, 17, code);
    b.expect_error(b.idx, 17, "unknown dtype code " + std::to_string(code));
  }
}

TEST(IndexedDatasetMalformed, IndexTruncatedAnywhere) {
  for (const size_t size : {5u, 20u, 33u, 34u, 60u, 107u, 109u}) {
    SCOPED_TRACE("truncated to " + std::to_string(size));
    Broken b;
    b.resize(b.idx, size);
    b.expect_error(b.idx, size, "truncated");
  }
}

TEST(IndexedDatasetMalformed, CountsThatDoNotFitTheFile) {
  {
    Broken b;
    b.patch<uint64_t>(b.idx, 18, kSequences + 1);
    b.expect_error(b.idx, kIdxBytes, "4 sequences (byte 18)");
  }
  {
    Broken b;
    b.patch<uint64_t>(b.idx, 18, uint64_t{1} << 62);  // 12 * count overflows 64 bits
    b.expect_error(b.idx, kIdxBytes, "more than 2^64");
  }
  {
    Broken b;
    b.patch<uint64_t>(b.idx, 26, 6);
    b.expect_error(b.idx, kIdxBytes, "6 document indices (byte 26)");
  }
  {
    Broken b;
    b.patch<uint64_t>(b.idx, 26, 0);
    b.expect_error(b.idx, 26, "document index count is 0");
  }
}

TEST(IndexedDatasetMalformed, IndexWithTrailingBytes) {
  for (const size_t extra : {1u, 2u, 4u, 8u}) {  // 3 (one per sequence) would be sequence modes
    Broken b;
    b.append(b.idx, extra);
    b.expect_error(b.idx, kIdxBytes, std::to_string(extra) + " trailing bytes");
  }
  Broken modes;
  modes.append(modes.idx, kSequences);
  EXPECT_TRUE(IndexedDataset(modes.prefix).has_sequence_modes());
}

TEST(IndexedDatasetMalformed, BinTruncated) {
  for (const size_t size : {0u, 1u, 39u}) {
    Broken b;
    b.resize(b.bin, size);
    b.expect_error(b.bin, size, "truncated");
  }
}

TEST(IndexedDatasetMalformed, BinWithTrailingBytes) {
  Broken b;
  b.append(b.bin, 4);
  b.expect_error(b.bin, kBinBytes, "4 more bytes");
}

TEST(IndexedDatasetMalformed, PointersThatDecreaseOrLeaveGaps) {
  {
    Broken b;
    b.patch<int64_t>(b.idx, pointer_at(2), 4);  // sequence 2 starts before sequence 1 (at 12)
    b.expect_error(b.idx, pointer_at(2), "pointers must increase");
  }
  {
    Broken b;
    b.patch<int64_t>(b.idx, pointer_at(1), 16);  // a gap after sequence 0
    b.expect_error(b.idx, pointer_at(1), "back to back");
  }
  {
    Broken b;
    b.patch<int64_t>(b.idx, pointer_at(0), 4);  // the first sequence does not start at 0
    b.expect_error(b.idx, pointer_at(0), "back to back");
  }
  {
    Broken b;
    b.patch<int64_t>(b.idx, pointer_at(1), -8);
    b.expect_error(b.idx, pointer_at(1), "pointers must increase");
  }
  {
    Broken b;
    b.patch<int32_t>(b.idx, length_at(2), -1);
    b.expect_error(b.idx, length_at(2), "negative length");
  }
  {
    Broken b;
    b.patch<int32_t>(b.idx, length_at(2), 7);  // the last sequence runs past the .bin
    b.expect_error(b.bin, kBinBytes, "runs to byte 44");
  }
}

TEST(IndexedDatasetMalformed, DocumentIndicesThatDecreaseOrPassTheSequenceCount) {
  {
    Broken b;
    b.patch<int64_t>(b.idx, document_index_at(0), 1);
    b.expect_error(b.idx, document_index_at(0), "the first must be 0");
  }
  {
    Broken b;
    b.patch<int64_t>(b.idx, document_index_at(2), 1);  // 0, 2, 1, 3, 3
    b.expect_error(b.idx, document_index_at(2), "must not decrease");
  }
  {
    Broken b;
    b.patch<int64_t>(b.idx, document_index_at(3), 4);  // past the 3 sequences
    b.expect_error(b.idx, document_index_at(3), "past the sequence count 3");
  }
  {
    Broken b;  // 0, 2, 2, 2, 2: sequence 2 belongs to no document
    b.patch<int64_t>(b.idx, document_index_at(3), 2);
    b.patch<int64_t>(b.idx, document_index_at(4), 2);
    b.expect_error(b.idx, document_index_at(4), "must be the sequence count 3");
  }
}

}  // namespace
}  // namespace ferry
