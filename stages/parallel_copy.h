#pragma once

#include <array>
#include <cstddef>
#include <vector>

namespace ferry {

/// One piece of packing: copy `bytes` from `source` to `target`, or, with a null source, fill them
/// with the `element`-byte `pattern` repeated (a pad value).
struct CopyOp {
  std::byte* target = nullptr;
  const std::byte* source = nullptr;
  size_t bytes = 0;
  std::array<std::byte, 8> pattern{};
  size_t element = 1;
};

/// Runs `ops`. When they move at least `parallel_bytes` in all, the concatenated byte range is cut
/// into equal pieces that oneTBB workers copy concurrently, in an arena of the copies' own with a slot
/// per hardware thread — so one 64 MiB tensor and 10 000 tensors of 1 KiB spread over the threads
/// alike. Blocks until done.
void run_copies(const std::vector<CopyOp>& ops, size_t parallel_bytes);

}  // namespace ferry
