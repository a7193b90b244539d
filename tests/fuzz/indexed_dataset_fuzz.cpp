// IndexedDataset (a Megatron-LM .idx + .bin pair) and TokenWindowSource over it, on hostile files.
// The input is the .idx, then the .bin, then an 8-byte trailer:
//   [0..3]  the .idx's length, little-endian (clamped to what the input holds)
//   [4..5]  TokenWindowSource's seq_len; [6] bit 0: add_extra_token; [7] unused
// A dataset that opens must keep its promises: sequences back to back from byte 0 adding up to
// total_tokens(), documents that cover them in order, token ranges inside the mapped .bin, and
// windows holding exactly the .bin's bytes.

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <ferry/io/formats/indexed_dataset.h>
#include <ferry/io/formats/token_window_source.h>
#include "tests/fuzz/fuzz_support.h"

namespace {

constexpr size_t kTrailerBytes = 8;
// Bounds on what one run walks: a 100 KB index may list thousands of sequences.
constexpr uint64_t kMaxWalk = 4096;

// Reads the first and last byte of a span of the mapping: outside it, the read faults.
void touch(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  volatile std::byte sink = bytes.front();
  sink = bytes.back();
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kTrailerBytes) return 0;
  const uint8_t* trailer = data + size - kTrailerBytes;
  const size_t files = size - kTrailerBytes;
  const size_t idx_bytes =
      std::min<size_t>(files, trailer[0] | (trailer[1] << 8) | (trailer[2] << 16) | (size_t{trailer[3]} << 24));
  const std::string prefix = ferry::fuzz::scratch_dir() + "/tokens";
  ferry::fuzz::write_file(prefix + ".idx", {data, idx_bytes});
  ferry::fuzz::write_file(prefix + ".bin", {data + idx_bytes, files - idx_bytes});
  const uint64_t bin_bytes = files - idx_bytes;

  ferry::fuzz::refused_or_ok([&] {
    const ferry::IndexedDataset dataset(prefix);
    const uint64_t itemsize = dataset.itemsize();
    FERRY_FUZZ_CHECK(dataset.total_tokens() * itemsize == bin_bytes);
    uint64_t tokens = 0;
    const uint64_t sequences = std::min(dataset.sequence_count(), kMaxWalk);
    for (uint64_t i = 0; i < sequences; ++i) {
      const int64_t length = dataset.sequence_length(i);
      FERRY_FUZZ_CHECK(length >= 0);
      FERRY_FUZZ_CHECK(dataset.sequence_pointer(i) == tokens * itemsize);
      const std::span<const std::byte> bytes = dataset.sequence_bytes(i);
      FERRY_FUZZ_CHECK(bytes.size() == static_cast<uint64_t>(length) * itemsize);
      touch(bytes);
      if (dataset.has_sequence_modes()) (void)dataset.sequence_mode(i);
      tokens += static_cast<uint64_t>(length);
    }
    if (sequences == dataset.sequence_count()) FERRY_FUZZ_CHECK(tokens == dataset.total_tokens());
    uint64_t previous_end = 0;
    for (uint64_t d = 0; d < std::min(dataset.document_count(), kMaxWalk); ++d) {
      const auto [first, last] = dataset.document_sequences(d);
      FERRY_FUZZ_CHECK(first <= last && last <= dataset.sequence_count());
      const auto [begin, end] = dataset.document_tokens(d);
      FERRY_FUZZ_CHECK(begin == previous_end && begin <= end && end <= dataset.total_tokens());
      touch(dataset.token_bytes(begin, end - begin));
      previous_end = end;
    }
    touch(dataset.token_bytes(0, dataset.total_tokens()));
  });

  ferry::fuzz::refused_or_ok([&] {
    const ferry::TokenWindowSource source(ferry::TokenWindowOptions{
        .prefix = prefix, .seq_len = trailer[4] | (trailer[5] << 8), .add_extra_token = (trailer[6] & 1) != 0});
    const uint64_t itemsize = ferry::token_type_size(source.stored());
    const uint8_t* bin = data + idx_bytes;
    for (const uint64_t i : {uint64_t{0}, source.size() / 2, source.size() - 1}) {
      const ferry::EncodedSample sample = source.read(i);
      FERRY_FUZZ_CHECK(sample.fields.size() == 1);
      if (source.widens_uint16()) continue;  // int32 values, not the .bin's bytes
      const at::Tensor& window = sample.fields[0];
      const uint64_t first = i * static_cast<uint64_t>(source.options().seq_len) * itemsize;
      FERRY_FUZZ_CHECK(static_cast<uint64_t>(window.nbytes()) == static_cast<uint64_t>(source.window()) * itemsize);
      FERRY_FUZZ_CHECK(first + window.nbytes() <= bin_bytes);
      FERRY_FUZZ_CHECK(std::memcmp(window.data_ptr(), bin + first, window.nbytes()) == 0);
    }
  });
  return 0;
}
