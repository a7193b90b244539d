#include <ferry/io/formats/tar_writer.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/io/formats/tar_index.h>
#include <ferry/io/util/atomic_file.h>
#include <ferry/pipeline/error.h>
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

using testing::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

std::string random_bytes(std::mt19937_64& rng, size_t size) {
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

// Streaming (take() after each member, then finish()) gives byte for byte what building the archive
// in memory gives, with the same offsets; TarIndex reads it back.
TEST(TarWriter, StreamedArchiveEqualsTheInMemoryOne) {
  std::mt19937_64 rng(21);
  for (TarLongNames dialect : {TarLongNames::kGnu, TarLongNames::kPax, TarLongNames::kUstarPrefix}) {
    TarWriter whole(dialect), streamed(dialect);
    std::string stream;
    std::vector<std::string> payloads;
    for (int k = 0; k < 30; ++k) {
      const std::string key = (k % 4 == 0 ? std::string(120, 'd') + "/" : std::string()) + std::to_string(100000 + k);
      const std::string data = random_bytes(rng, rng() % 3000);
      payloads.push_back(data);
      const TarWriter::Entry a = whole.add(key + ".bin", data);
      const TarWriter::Entry b = streamed.add(key + ".bin", data);
      whole.add(key + ".cls", std::to_string(k));
      streamed.add(key + ".cls", std::to_string(k));
      EXPECT_EQ(a.header_offset, b.header_offset);
      EXPECT_EQ(a.data_offset, b.data_offset);
      stream += streamed.take();
      EXPECT_TRUE(streamed.bytes().empty());
      EXPECT_EQ(streamed.offset(), stream.size());
    }
    stream += streamed.finish();
    const std::string expected = whole.finish();
    ASSERT_EQ(stream, expected);
    EXPECT_EQ(expected.size() % 10240, 0u);

    const TempDir dir("ferry_tar_writer");
    TarWriter::write_file(dir / "shard.tar", stream);
    const TarIndex index(dir / "shard.tar");
    ASSERT_EQ(index.sample_count(), 30u);
    for (size_t s = 0; s < 30; ++s) {
      const TarMember& member = index.members(s)[0];
      std::string data(member.size, '\0');
      index.read(member, data.data());
      EXPECT_EQ(data, payloads[s]) << "sample " << s;
      EXPECT_EQ(member.data_offset, streamed.entries()[2 * s].data_offset);
    }
  }
}

TEST(TarWriter, RefusesNamesItCannotStore) {
  TarWriter writer(TarLongNames::kUstarPrefix);
  EXPECT_THROW(writer.add(std::string(130, 'x'), "no slash to split at"), Error);
  EXPECT_THROW(writer.add("", "nameless"), Error);
  EXPECT_TRUE(writer.entries().empty());
}

TEST(AtomicFile, AppearsWholeOnCommitAndNeverHalfWritten) {
  const TempDir dir("ferry_atomic_file");
  const std::string path = dir / "data.bin";
  AtomicFile::write_whole(path, "old");
  {
    AtomicFile file(path);
    file.write("new ");
    file.write("content");
    EXPECT_EQ(file.size(), 11u);
    EXPECT_TRUE(exists(path + ".partial"));
    EXPECT_EQ(read_file(path), "old");  // readers see the previous file until the rename
    file.commit();
    EXPECT_THROW(file.commit(), Error);
    EXPECT_THROW(file.write("more"), Error);
  }
  EXPECT_EQ(read_file(path), "new content");
  EXPECT_FALSE(exists(path + ".partial"));

  // Abandoned (an exception on the way, say): the partial file goes, the old file stays.
  {
    AtomicFile file(path);
    file.write("half");
  }
  EXPECT_FALSE(exists(path + ".partial"));
  EXPECT_EQ(read_file(path), "new content");

  // Moved: only the new owner commits or removes.
  {
    AtomicFile first(dir / "moved.bin");
    first.write("moved");
    AtomicFile second(std::move(first));
    second.commit();
  }
  EXPECT_EQ(read_file(dir / "moved.bin"), "moved");
}

TEST(AtomicFile, ErrorsNameThePath) {
  const TempDir dir("ferry_atomic_file");
  const std::string path = dir / "no-such-folder/file.bin";
  try {
    AtomicFile file(path);
    ADD_FAILURE() << "created a file in a folder that does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ".partial"), std::string::npos) << e.what();
  }
  // What is there and not a file (a folder, a FIFO) is refused before anything is written: a rename
  // would replace it. The message names the path and what it is.
  ASSERT_EQ(::mkdir((dir / "folder").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir / "folder/inside").c_str(), 0755), 0);
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  for (const std::string name : {"folder", "fifo"}) {
    try {
      AtomicFile file(dir / name);
      ADD_FAILURE() << "opened " << name << " to replace it";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(dir / name + ": it is a"), std::string::npos) << e.what();
    }
  }
  // A link is written through: its target replaced, the link kept.
  ASSERT_EQ(::symlink("target.bin", (dir / "link.bin").c_str()), 0);
  AtomicFile::write_whole(dir / "link.bin", "through the link");
  struct stat info {};
  ASSERT_EQ(::lstat((dir / "link.bin").c_str(), &info), 0);
  EXPECT_TRUE(S_ISLNK(info.st_mode));
  std::ifstream target(dir / "target.bin");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(target), {}), "through the link");
  EXPECT_FALSE(exists(dir / "folder.partial"));
}

}  // namespace
}  // namespace ferry
