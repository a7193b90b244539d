// TarIndex on a hostile tar shard (the whole input, written to a scratch file: TarIndex reads a
// path), then TarShardSource over the same shard with its default fields. An index that opens must
// keep its promises: every member's data lies inside the file and read() returns exactly those
// bytes of the input; extension ids and find() agree with members(); and the source's samples hold
// the members' bytes.

#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <vector>

#include <ferry/io/formats/tar_index.h>
#include <ferry/io/formats/tar_shard_source.h>
#include "tests/fuzz/fuzz_support.h"

namespace {

// Enough samples to pass every code path; a shard of thousands of empty members would otherwise
// make each run slow without covering more.
constexpr size_t kMaxSamples = 256;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ferry::fuzz::scratch_dir() + "/shard.tar";
  ferry::fuzz::write_file(path, {data, size});
  ferry::fuzz::refused_or_ok([&] {
    const ferry::TarIndex index(path);
    FERRY_FUZZ_CHECK(index.file_size() == size);
    std::vector<uint8_t> buffer;
    for (size_t s = 0; s < index.sample_count() && s < kMaxSamples; ++s) {
      FERRY_FUZZ_CHECK(!index.key(s).empty());
      FERRY_FUZZ_CHECK(!index.members(s).empty());
      for (const ferry::TarMember& member : index.members(s)) {
        FERRY_FUZZ_CHECK(member.header_offset < member.data_offset);
        FERRY_FUZZ_CHECK(member.data_offset <= size && member.size <= size - member.data_offset);
        buffer.resize(member.size);
        index.read(member, buffer.data());
        FERRY_FUZZ_CHECK(member.size == 0 || std::memcmp(buffer.data(), data + member.data_offset, member.size) == 0);
        const std::string& extension = index.extension(member);
        FERRY_FUZZ_CHECK(index.extension_id(extension) == member.extension);
        FERRY_FUZZ_CHECK(index.find(s, member.extension) == &member);
      }
    }
  });
  ferry::fuzz::refused_or_ok([&] {
    const ferry::TarShardSource source(ferry::TarShardOptions{.shards = {path}});
    for (uint64_t i = 0; i < source.size() && i < kMaxSamples; ++i) {
      const ferry::EncodedSample sample = source.read(i);
      FERRY_FUZZ_CHECK(sample.index == i);
      FERRY_FUZZ_CHECK(sample.fields.size() == source.fields().size());
    }
  });
  return 0;
}
