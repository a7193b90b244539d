#include <ferry/io/formats/tar_index.h>
#include <ferry/io/remote/data_store.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/io/formats/tar_writer.h>
#include <ferry/pipeline/error.h>
#include "tests/support/compress.h"
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

using testing::TempDir;

std::string random_bytes(std::mt19937_64& rng, size_t size) {
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

std::string read_member(const TarIndex& index, const TarMember& member) {
  std::string out(member.size, '\0');
  index.read(member, out.data());
  return out;
}

// The message of the ferry::Error that indexing `path` throws ("" and a failure when none).
std::string index_error(const std::string& path) {
  try {
    TarIndex index(path);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "indexing " << path << " did not throw";
  return "";
}

void expect_contains(const std::string& text, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts)
    EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// Recomputes a header's checksum after a test changed it.
void fix_checksum(std::string& tar, uint64_t header) {
  char* block = tar.data() + header;
  std::memset(block + TarWriter::kChecksumField, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(block[i]);
  std::snprintf(block + TarWriter::kChecksumField, 8, "%06o", sum);
}

struct Expected {
  std::string key;
  std::vector<std::pair<std::string, std::string>> members;  // extension, data
};

const char* dialect_name(TarLongNames dialect) {
  switch (dialect) {
    case TarLongNames::kGnu: return "gnu";
    case TarLongNames::kPax: return "pax";
    default: return "ustar";
  }
}

// Random samples: 1 to 4 members each, sizes around block boundaries, some keys over 100 bytes.
std::vector<Expected> random_samples(std::mt19937_64& rng, size_t count, bool allow_unsplittable) {
  static const std::vector<std::string> kExtensions = {"jpg", "cls", "json", "seg.png", "txt", "npy"};
  static const std::vector<size_t> kSizes = {0, 1, 100, 511, 512, 513, 1023, 1024, 1025, 4096};
  std::vector<Expected> samples;
  for (size_t s = 0; s < count; ++s) {
    Expected sample;
    char number[24];
    std::snprintf(number, sizeof number, "%06zu", s);
    switch (rng() % 4) {
      case 0: sample.key = number; break;
      case 1: sample.key = "dir/sub/" + std::string(number); break;
      case 2: sample.key = std::string(90, 'p') + "/" + std::string(60, 'q') + "/" + number; break;  // ustar prefix
      default: sample.key = allow_unsplittable ? std::string(130, 'r') + number : "dir/" + std::string(number); break;
    }
    std::vector<std::string> extensions = kExtensions;
    std::shuffle(extensions.begin(), extensions.end(), rng);
    extensions.resize(1 + rng() % 4);
    for (const std::string& extension : extensions) {
      const size_t size = rng() % 3 == 0 ? rng() % 3000 : kSizes[rng() % kSizes.size()];
      sample.members.emplace_back(extension, random_bytes(rng, size));
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

TEST(TarIndex, IndexesEveryMemberAndReadsItsBytesExactlyInEveryNameDialect) {
  const TempDir dir("ferry_tar_index");
  std::mt19937_64 rng(11);
  for (TarLongNames dialect : {TarLongNames::kGnu, TarLongNames::kPax, TarLongNames::kUstarPrefix}) {
    SCOPED_TRACE(dialect_name(dialect));
    const std::vector<Expected> samples = random_samples(rng, 40, dialect != TarLongNames::kUstarPrefix);
    TarWriter writer(dialect);
    for (const Expected& sample : samples) {
      for (const auto& [extension, data] : sample.members) writer.add(sample.key + "." + extension, data);
    }
    const std::string path = dir / (std::string(dialect_name(dialect)) + ".tar");
    TarWriter::write_file(path, writer.finish());

    const TarIndex index(path);
    EXPECT_EQ(index.path(), path);
    ASSERT_EQ(index.sample_count(), samples.size());
    size_t entry = 0;
    for (size_t s = 0; s < samples.size(); ++s) {
      EXPECT_EQ(index.key(s), samples[s].key);
      const auto members = index.members(s);
      ASSERT_EQ(members.size(), samples[s].members.size());
      for (size_t m = 0; m < members.size(); ++m, ++entry) {
        const TarWriter::Entry& written = writer.entries()[entry];
        EXPECT_EQ(index.extension(members[m]), samples[s].members[m].first);
        EXPECT_EQ(members[m].size, written.size);
        EXPECT_EQ(members[m].data_offset, written.data_offset);
        EXPECT_EQ(members[m].header_offset, written.header_offset);
        EXPECT_EQ(read_member(index, members[m]), samples[s].members[m].second) << written.name;
        EXPECT_EQ(index.find(s, members[m].extension), &members[m]);
      }
    }
  }
}

TEST(TarIndex, ReadsNamesLongerThanAnyHeaderFieldThroughGnuAndPax) {
  const TempDir dir("ferry_tar_index");
  for (TarLongNames dialect : {TarLongNames::kGnu, TarLongNames::kPax}) {
    const std::string key = "deep/" + std::string(300, 'k') + "/" + std::string(250, 'm');
    TarWriter writer(dialect);
    writer.add(key + ".jpg", "image");
    writer.add(key + ".cls", "3\n");
    writer.add("short.jpg", "s");
    const std::string path = dir / "long.tar";
    TarWriter::write_file(path, writer.finish());
    const TarIndex index(path);
    ASSERT_EQ(index.sample_count(), 2u);
    EXPECT_EQ(index.key(0), key);
    EXPECT_EQ(read_member(index, index.members(0)[1]), "3\n");
    EXPECT_EQ(index.key(1), "short");                  // the long name applied to its own member only
    EXPECT_EQ(index.members(0)[0].header_offset, 0u);  // a member's offset is its first (extended) header's
  }
}

TEST(TarIndex, SplitsKeysAtTheFirstDotOfTheLastComponentAndSkipsWhatWebDatasetSkips) {
  const TempDir dir("ferry_tar_index");
  TarWriter writer;
  writer.add("a/", "", '5');
  writer.add("a/b/", "", '5');
  writer.add("a/b/000123.jpg", "j");
  writer.add("a/b/000123.seg.png", "s");
  writer.add("a/b/000123.lnk", "", '2');  // a symlink: no data, skipped
  writer.add("__meta__", "m");            // top-level metadata: skipped
  writer.add("a.b/c.JPG", "upper");       // dots in a directory; extension lower-cased
  writer.add("a.b/noext", "n");           // no extension: skipped
  writer.add("a.b/.hidden", "h");         // no basename: skipped
  writer.add("./x.txt", "t");
  writer.add("./x.json", "{}");
  const std::string path = dir / "names.tar";
  TarWriter::write_file(path, writer.finish());
  const TarIndex index(path);
  ASSERT_EQ(index.sample_count(), 3u);
  EXPECT_EQ(index.key(0), "a/b/000123");
  EXPECT_EQ(index.key(1), "a.b/c");
  EXPECT_EQ(index.key(2), "./x");
  ASSERT_EQ(index.members(0).size(), 2u);
  EXPECT_EQ(index.extension(index.members(0)[0]), "jpg");
  EXPECT_EQ(index.extension(index.members(0)[1]), "seg.png");
  EXPECT_EQ(index.extension(index.members(1)[0]), "jpg");
  EXPECT_EQ(read_member(index, index.members(1)[0]), "upper");
  EXPECT_EQ(index.extensions(), (std::vector<std::string>{"jpg", "seg.png", "txt", "json"}));
  EXPECT_EQ(index.extension_id("JPG"), std::optional<uint32_t>(0));
  EXPECT_EQ(index.extension_id("png"), std::nullopt);
  EXPECT_EQ(index.find(2, 0), nullptr);
}

TEST(TarIndex, AppliesPaxLocalAndGlobalRecordsAndBase256Sizes) {
  const TempDir dir("ferry_tar_index");
  TarWriter writer(TarLongNames::kPax);
  writer.add_pax_global({{"comment", "made by a test"}});
  writer.add_pax_local({{"path", "renamed/000001.jpg"}, {"mtime", "1700000000.5"}});
  writer.add("ignored.bin", "first");
  writer.set_base256_sizes(true);
  writer.add("renamed/000001.cls", "7");
  writer.set_base256_sizes(false);
  writer.add_pax_global({{"path", "everyone.txt"}});  // odd, but pax says it names every later member
  writer.add_pax_local({{"path", ""}});               // ... unless a local record removes it
  writer.add("own/000002.txt", "own");
  const std::string path = dir / "pax.tar";
  TarWriter::write_file(path, writer.finish());
  const TarIndex index(path);
  ASSERT_EQ(index.sample_count(), 2u);
  EXPECT_EQ(index.key(0), "renamed/000001");
  ASSERT_EQ(index.members(0).size(), 2u);
  EXPECT_EQ(read_member(index, index.members(0)[0]), "first");
  EXPECT_EQ(read_member(index, index.members(0)[1]), "7");
  EXPECT_EQ(index.key(1), "own/000002");
}

TEST(TarIndex, AcceptsAnEmptyArchiveAndALoneZeroBlock) {
  const TempDir dir("ferry_tar_index");
  TarWriter::write_file(dir / "empty.tar", TarWriter().finish());
  EXPECT_EQ(TarIndex(dir / "empty.tar").sample_count(), 0u);
  TarWriter writer;
  writer.add("a.jpg", "x");
  TarWriter::write_file(dir / "lone.tar", writer.bytes() + std::string(512, '\0'));
  EXPECT_EQ(TarIndex(dir / "lone.tar").sample_count(), 1u);
}

// ---- malformed shards: an Error naming the file and the offset, never a crash --------------------

struct Shard {
  TarWriter writer;
  std::string bytes;
};

Shard valid_shard() {
  std::mt19937_64 rng(5);
  Shard shard;
  for (int s = 0; s < 4; ++s) {
    shard.writer.add("s/00000" + std::to_string(s) + ".jpg", random_bytes(rng, 700 + 300 * s));
    shard.writer.add("s/00000" + std::to_string(s) + ".cls", std::to_string(s));
  }
  shard.bytes = shard.writer.finish();
  return shard;
}

TEST(TarIndex, RejectsABadHeaderChecksumNamingFileAndOffset) {
  const TempDir dir("ferry_tar_index");
  Shard shard = valid_shard();
  const uint64_t header = shard.writer.entries()[2].header_offset;
  shard.bytes[header + 9] ^= 0x20;  // one bit of the name: "s/000002.Jpg"
  const std::string path = dir / "checksum.tar";
  TarWriter::write_file(path, shard.bytes);
  expect_contains(index_error(path), {path, "bad header checksum at byte " + std::to_string(header), "s/00"});
}

TEST(TarIndex, RejectsAMemberCutMidDataNamingFileMemberAndOffset) {
  const TempDir dir("ferry_tar_index");
  const Shard shard = valid_shard();
  const TarWriter::Entry& cut = shard.writer.entries()[4];
  const std::string path = dir / "cut.tar";
  TarWriter::write_file(path, shard.bytes.substr(0, cut.data_offset + cut.size / 2));
  expect_contains(index_error(path), {path, "member '" + cut.name + "'",
                                      "header at byte " + std::to_string(cut.header_offset), "truncated"});
}

TEST(TarIndex, RejectsAHeaderCutByTheEndOfTheFile) {
  const TempDir dir("ferry_tar_index");
  const Shard shard = valid_shard();
  const uint64_t header = shard.writer.entries()[3].header_offset;
  const std::string path = dir / "header.tar";
  TarWriter::write_file(path, shard.bytes.substr(0, header + 200));
  expect_contains(index_error(path), {path, "truncated header at byte " + std::to_string(header)});
}

TEST(TarIndex, RejectsAnArchiveCutBetweenMembers) {
  const TempDir dir("ferry_tar_index");
  const Shard shard = valid_shard();
  const std::string path = dir / "between.tar";
  const uint64_t end = shard.writer.entries()[5].header_offset;
  TarWriter::write_file(path, shard.bytes.substr(0, end));
  expect_contains(index_error(path), {path, "end-of-archive", "byte " + std::to_string(end)});
}

TEST(TarIndex, RejectsALoneZeroBlockFollowedByMoreMembers) {
  // A header zeroed in place used to end the shard there, silently dropping every later member.
  const TempDir dir("ferry_tar_index");
  Shard shard = valid_shard();
  for (const size_t entry : {size_t{1}, size_t{2}, size_t{7}}) {
    std::string bytes = shard.bytes;
    const uint64_t header = shard.writer.entries()[entry].header_offset;
    std::fill_n(bytes.begin() + static_cast<std::ptrdiff_t>(header), 512, '\0');
    const std::string path = dir / ("zeroed" + std::to_string(entry) + ".tar");
    TarWriter::write_file(path, bytes);
    expect_contains(index_error(path), {path, "lone zero block at byte " + std::to_string(header),
                                        "followed by more data at byte " + std::to_string(header + 512)});
  }
  // Two zero blocks end the archive whatever follows them; so does a zero block that only zeros follow.
  TarWriter writer;
  writer.add("a.jpg", "x");
  TarWriter::write_file(dir / "two.tar", writer.bytes() + std::string(1024, '\0') + "trailing garbage");
  EXPECT_EQ(TarIndex(dir / "two.tar").sample_count(), 1u);
  TarWriter::write_file(dir / "short.tar", writer.bytes() + std::string(512 + 100, '\0'));
  EXPECT_EQ(TarIndex(dir / "short.tar").sample_count(), 1u);
}

TEST(TarIndex, RejectsNonAdjacentMembersOfOneSampleNamingBothOffsets) {
  const TempDir dir("ferry_tar_index");
  TarWriter writer;
  writer.add("a.jpg", "1");
  writer.add("b.jpg", "2");
  writer.add("a.cls", "3");
  const std::string path = dir / "adjacent.tar";
  TarWriter::write_file(path, writer.finish());
  expect_contains(index_error(path),
                  {path, "'a'", "byte 0", "byte " + std::to_string(writer.entries()[2].header_offset), "consecutive"});
}

TEST(TarIndex, RejectsAnExtensionRepeatedInOneSample) {
  const TempDir dir("ferry_tar_index");
  TarWriter writer;
  writer.add("a.jpg", "1");
  writer.add("a.JPG", "2");
  const std::string path = dir / "repeat.tar";
  TarWriter::write_file(path, writer.finish());
  expect_contains(index_error(path), {path, "'jpg'", "byte 0", "byte 1024"});
}

TEST(TarIndex, RejectsGarbageEmptyMissingAndNonRegularFiles) {
  const TempDir dir("ferry_tar_index");
  std::mt19937_64 rng(3);
  TarWriter::write_file(dir / "garbage.tar", random_bytes(rng, 5000));
  expect_contains(index_error(dir / "garbage.tar"), {dir / "garbage.tar", "byte 0", "checksum"});
  TarWriter::write_file(dir / "text.tar", std::string(2000, 'a'));
  expect_contains(index_error(dir / "text.tar"), {dir / "text.tar", "byte 0"});
  TarWriter::write_file(dir / "empty.tar", "");
  expect_contains(index_error(dir / "empty.tar"), {dir / "empty.tar", "empty"});
  expect_contains(index_error(dir / "missing.tar"), {dir / "missing.tar", "cannot open"});
  expect_contains(index_error(dir.path()), {dir.path(), "not a regular file"});
}

TEST(TarIndex, ReadsCompressedShardsAndNamesWhatIsWrongWithBadOnes) {
  const TempDir dir("ferry_tar_index");
  const std::string tar = dir / "shard.tar";
  const Shard shard = valid_shard();
  TarWriter::write_file(tar, shard.bytes);
  // Decoded into a cache of the test's own (DataStore), then indexed like the plain shard.
  const auto store = DataStore::get(RemoteOptions{.cache_dir = dir / "cache"});
  const auto open = [&store](const std::string& path) {
    return TarIndex(store->open(path, DataStore::Access::kWhole, "tar shard"));
  };
  TarWriter::write_file(tar + ".gz", ferry::testing::gzip_bytes(shard.bytes));
  TarWriter::write_file(tar + ".xz", ferry::testing::xz_bytes(shard.bytes));
  TarWriter::write_file(tar + ".zst", ferry::testing::zstd_bytes(shard.bytes));
  const TarIndex plain(tar);
  for (const char* suffix : {".gz", ".xz", ".zst"}) {
    const TarIndex index = open(tar + suffix);
    ASSERT_EQ(index.sample_count(), plain.sample_count()) << suffix;
    for (size_t s = 0; s < plain.sample_count(); ++s) {
      EXPECT_EQ(index.key(s), plain.key(s));
      ASSERT_EQ(index.members(s).size(), plain.members(s).size());
      for (size_t m = 0; m < plain.members(s).size(); ++m) {
        std::string want(plain.members(s)[m].size, '\0'), got(index.members(s)[m].size, '\0');
        plain.read(plain.members(s)[m], want.data());
        index.read(index.members(s)[m], got.data());
        EXPECT_EQ(got, want) << suffix << " sample " << s;
      }
    }
  }
  // Data that only starts like a compressed stream: an error naming the file and the format.
  std::mt19937_64 rng(8);
  const std::vector<std::pair<std::string, std::string>> magics = {{"gzip", "\x1f\x8b\x08\x00"},
                                                                   {"xz", std::string("\xfd"
                                                                                      "7zXZ\0",
                                                                                      6)},
                                                                   {"zstd", "\x28\xb5\x2f\xfd"}};
  for (const auto& [format, magic] : magics) {
    const std::string path = dir / ("shard." + format);
    TarWriter::write_file(path, magic + random_bytes(rng, 2000));
    try {
      open(path);
      ADD_FAILURE() << format << " noise indexed";
    } catch (const Error& e) {
      expect_contains(e.what(), {path, format});
    }
  }
  // bzip2 is refused, saying how to recompress.
  TarWriter::write_file(dir / "shard.bz2", "BZh91AY&SY" + random_bytes(rng, 2000));
  try {
    open(dir / "shard.bz2");
    ADD_FAILURE() << "bzip2 indexed";
  } catch (const Error& e) {
    expect_contains(e.what(), {dir / "shard.bz2", "bzip2", "recompress"});
  }
  // A tar file whose first name happens to start like a magic number is still a tar file.
  TarWriter named;
  named.add("BZh.cls", "1");
  TarWriter::write_file(dir / "named.tar", named.finish());
  EXPECT_NO_THROW(TarIndex(dir / "named.tar"));
}

TEST(TarIndex, RejectsANonOctalSizeField) {
  const TempDir dir("ferry_tar_index");
  Shard shard = valid_shard();
  const uint64_t header = shard.writer.entries()[1].header_offset;
  shard.bytes[header + TarWriter::kSizeField + 5] = '9';
  fix_checksum(shard.bytes, header);
  const std::string path = dir / "octal.tar";
  TarWriter::write_file(path, shard.bytes);
  expect_contains(index_error(path), {path, "bad size field", "header at byte " + std::to_string(header)});
}

TEST(TarIndex, RejectsBrokenExtendedHeaders) {
  const TempDir dir("ferry_tar_index");
  {  // a pax record whose length is not a number
    TarWriter writer(TarLongNames::kPax);
    writer.add_pax_local({{"path", "x.jpg"}});
    writer.add("y.jpg", "y");
    std::string bytes = writer.finish();
    bytes[512] = 'z';
    TarWriter::write_file(dir / "pax.tar", bytes);
    expect_contains(index_error(dir / "pax.tar"), {dir / "pax.tar", "malformed pax record", "header at byte 0"});
  }
  {  // a pax header with no member after it
    TarWriter writer(TarLongNames::kPax);
    writer.add("y.jpg", "y");
    writer.add_pax_local({{"path", "x.jpg"}});
    TarWriter::write_file(dir / "dangling.tar", writer.finish());
    expect_contains(index_error(dir / "dangling.tar"), {dir / "dangling.tar", "extended header at byte 1024"});
  }
  {  // a GNU long name too large to be one
    TarWriter writer(TarLongNames::kGnu);
    writer.add(std::string(2 << 20, 'n') + ".jpg", "y");
    TarWriter::write_file(dir / "huge.tar", writer.finish());
    expect_contains(index_error(dir / "huge.tar"), {dir / "huge.tar", "GNU long name at byte 0"});
  }
  {  // sparse members
    TarWriter writer;
    writer.add("s.jpg", "abc", 'S');
    TarWriter::write_file(dir / "sparse.tar", writer.finish());
    expect_contains(index_error(dir / "sparse.tar"), {dir / "sparse.tar", "sparse"});
  }
}

// Random damage to a valid shard: every outcome is an index whose members lie inside the file (and
// read back) or a ferry::Error naming the file; never another exception, a crash or a wild read.
// A shard with long names in `dialect` (and a pax global header): extended headers to damage.
Shard long_name_shard(TarLongNames dialect) {
  std::mt19937_64 rng(6);
  Shard shard{TarWriter(dialect), ""};
  if (dialect == TarLongNames::kPax) shard.writer.add_pax_global({{"comment", "damage me"}});
  for (int s = 0; s < 3; ++s) {
    const std::string key = std::string(120, 'k') + "/" + std::to_string(s);
    shard.writer.add(key + ".jpg", random_bytes(rng, 300 + 400 * s));
    shard.writer.add(key + ".cls", std::to_string(s));
  }
  shard.bytes = shard.writer.finish();
  return shard;
}

TEST(TarIndex, SurvivesRandomDamageWithAnErrorOrAnInBoundsIndex) {
  const TempDir dir("ferry_tar_index");
  const std::vector<Shard> shards = {valid_shard(), long_name_shard(TarLongNames::kPax),
                                     long_name_shard(TarLongNames::kGnu)};
  std::mt19937_64 rng(17);
  const std::string path = dir / "damaged.tar";
  int errors = 0;
  for (int trial = 0; trial < 900; ++trial) {
    const Shard& shard = shards[static_cast<size_t>(trial / 4) % shards.size()];
    std::string bytes = shard.bytes;
    const uint64_t header = 512 * (rng() % (bytes.size() / 512 - 2));  // any block: headers, data, the end marker
    switch (trial % 4) {
      case 0: bytes.resize(rng() % bytes.size()); break;
      case 1: bytes[rng() % bytes.size()] = static_cast<char>(rng()); break;
      case 2:  // any header byte, checksum repaired so the damage gets past it
        bytes[header + rng() % 512] = static_cast<char>(rng());
        fix_checksum(bytes, header);
        break;
      default: {        // a plausible but wrong size
        char size[24];  // 11 digits and a NUL fit the field: the value is below 8^11
        std::snprintf(size, sizeof size, "%011llo", static_cast<unsigned long long>(rng() % (bytes.size() * 2)));
        std::memcpy(bytes.data() + header + TarWriter::kSizeField, size, 12);
        fix_checksum(bytes, header);
        break;
      }
    }
    TarWriter::write_file(path, bytes);
    try {
      const TarIndex index(path);
      for (size_t s = 0; s < index.sample_count(); ++s) {
        for (const TarMember& member : index.members(s)) {
          ASSERT_LE(member.data_offset + member.size, bytes.size());
          EXPECT_EQ(read_member(index, member), bytes.substr(member.data_offset, member.size));
        }
      }
    } catch (const Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 50);
}

TEST(TarIndex, MovesItsOpenFile) {
  const TempDir dir("ferry_tar_index");
  const Shard shard = valid_shard();
  TarWriter::write_file(dir / "move.tar", shard.bytes);
  TarIndex first(dir / "move.tar");
  TarIndex second = std::move(first);
  EXPECT_EQ(second.sample_count(), 4u);
  EXPECT_EQ(read_member(second, second.members(3)[1]), "3");
  TarIndex third(dir / "move.tar");
  third = std::move(second);
  EXPECT_EQ(read_member(third, third.members(0)[1]), "0");
}

}  // namespace
}  // namespace ferry
