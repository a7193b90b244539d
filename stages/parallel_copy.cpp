#include "stages/parallel_copy.h"

#include <algorithm>
#include <cstring>

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

namespace ferry {
namespace {

// Pieces smaller than this cost more in scheduling than they gain in bandwidth.
constexpr size_t kMinPiece = size_t{256} << 10;

void run_part(const CopyOp& op, size_t begin, size_t end) {
  if (begin >= end) return;
  if (op.source != nullptr) {
    std::memcpy(op.target + begin, op.source + begin, end - begin);
    return;
  }
  bool zero = true;
  for (size_t i = 0; i < op.element; ++i) zero = zero && op.pattern[i] == std::byte{0};
  if (zero) {
    std::memset(op.target + begin, 0, end - begin);
    return;
  }
  // A piece may start or end inside an element: byte k of the op takes pattern[k % element].
  size_t at = begin;
  for (; at < end && at % op.element != 0; ++at) op.target[at] = op.pattern[at % op.element];
  for (; at + op.element <= end; at += op.element) std::memcpy(op.target + at, op.pattern.data(), op.element);
  for (; at < end; ++at) op.target[at] = op.pattern[at % op.element];
}

}  // namespace

void run_copies(const std::vector<CopyOp>& ops, size_t parallel_bytes) {
  std::vector<size_t> starts(ops.size() + 1, 0);  // prefix sums: op i covers [starts[i], starts[i+1])
  for (size_t i = 0; i < ops.size(); ++i) starts[i + 1] = starts[i] + ops[i].bytes;
  const size_t total = starts.back();
  const auto threads = static_cast<size_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  const size_t pieces = total < parallel_bytes ? 1 : std::clamp<size_t>(total / kMinPiece, 1, 4 * threads);
  if (pieces == 1) {
    for (const CopyOp& op : ops) run_part(op, 0, op.bytes);
    return;
  }
  const size_t piece = (total + pieces - 1) / pieces;
  tbb::parallel_for(size_t{0}, pieces, [&](size_t p) {
    const size_t begin = std::min(total, p * piece);
    const size_t end = p + 1 == pieces ? total : std::min(total, (p + 1) * piece);
    size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
    for (; i < ops.size() && starts[i] < end; ++i) {
      run_part(ops[i], std::max(begin, starts[i]) - starts[i], std::min(end, starts[i + 1]) - starts[i]);
    }
  });
}

}  // namespace ferry
