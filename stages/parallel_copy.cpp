#include "ferry/stages/parallel_copy.h"

#include <algorithm>
#include <cstring>

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "ferry/pipeline/thread_start.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ferry {
namespace {

// Pieces smaller than this cost more in scheduling than they gain in bandwidth.
constexpr size_t kMinPiece = size_t{256} << 10;
// Copies at least this long bypass the cache (see stream_copy).
constexpr size_t kStreamBytes = size_t{64} << 10;

// Note [streaming stores into staging slabs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The CPU never reads a staging slab again: the copy engine does, from memory. Ordinary stores
// first read each destination line into the cache (read-for-ownership) and later write it back,
// so a pack moves three bytes through memory for each byte copied, while the copy engine reads
// the previous batch at link speed. Non-temporal stores write whole lines straight to memory:
// two bytes per byte, and the cache keeps the source data. The stores are weakly ordered, so
// each piece ends with a store fence before the copy engine may be told to read it.
void stream_copy(std::byte* target, const std::byte* source, size_t bytes) {
#if defined(__SSE2__)
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(target) % 16) % 16);
  std::memcpy(target, source, head);
  size_t at = head;
  for (; at + 64 <= bytes; at += 64) {
    const auto* from = reinterpret_cast<const __m128i*>(source + at);
    auto* to = reinterpret_cast<__m128i*>(target + at);
    const __m128i a = _mm_loadu_si128(from);
    const __m128i b = _mm_loadu_si128(from + 1);
    const __m128i c = _mm_loadu_si128(from + 2);
    const __m128i d = _mm_loadu_si128(from + 3);
    _mm_stream_si128(to, a);
    _mm_stream_si128(to + 1, b);
    _mm_stream_si128(to + 2, c);
    _mm_stream_si128(to + 3, d);
  }
  std::memcpy(target + at, source + at, bytes - at);
  _mm_sfence();
#else
  std::memcpy(target, source, bytes);
#endif
}

int threads() {
  static const int count = std::max(1, tbb::info::default_concurrency());
  return count;
}

// Note [an arena for the copies]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A large copy is spread over an arena of its own, a slot per hardware thread, not over the arena of
// the thread that asks for it. In a pipeline's arena (a slot per decode thread and per stage), pack's
// 64 MiB copy in bench/transfer a) took 2.0-2.3 ms a batch, against 1.1 ms for the same copy alone, and
// set the delivered rate: 29-34 GB/s. In this arena it takes 1.2 ms and ferry delivers 48 GB/s, what
// the best plain staging loop of the same run delivers (H200 host, 16 threads, alternated). Why the
// pipeline's arena lent the copy fewer threads was not pinned down: 4 or 14 decode threads made no
// difference, and an arena of its own with 8 slots did little better than none. Pipelines whose samples
// are placed in the slab as they decode (Note [placing samples]) never get here and ran as before.
// Copies too small to be spread never enter it. The arena is sized to the machine, not to the caller:
// a large copy briefly takes every hardware thread, however few decode threads a pipeline has.
tbb::task_arena& copy_arena() {
  // Never destroyed: a thread still copying at exit (a start_copy worker) must find it.
  static tbb::task_arena* const arena = [] {
    detail::check_threads_can_start(static_cast<size_t>(threads()), "the threads that spread large copies");
    return new tbb::task_arena(threads());
  }();
  return *arena;
}

void run_part(const CopyOp& op, size_t begin, size_t end) {
  if (begin >= end) return;
  if (op.source != nullptr) {
    if (end - begin >= kStreamBytes) {
      stream_copy(op.target + begin, op.source + begin, end - begin);
    } else {
      std::memcpy(op.target + begin, op.source + begin, end - begin);
    }
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
  size_t total = 0;
  for (const CopyOp& op : ops) total += op.bytes;
  const size_t pieces =
      total < parallel_bytes ? 1 : std::clamp<size_t>(total / kMinPiece, 1, 4 * static_cast<size_t>(threads()));
  if (pieces == 1) {  // without allocating: a wide batch's pack calls this once per field
    for (const CopyOp& op : ops) run_part(op, 0, op.bytes);
    return;
  }
  std::vector<size_t> starts(ops.size() + 1, 0);  // prefix sums: op i covers [starts[i], starts[i+1])
  for (size_t i = 0; i < ops.size(); ++i) starts[i + 1] = starts[i] + ops[i].bytes;
  const size_t piece = (total + pieces - 1) / pieces;
  copy_arena().execute([&] {  // Note [an arena for the copies]
    tbb::parallel_for(size_t{0}, pieces, [&](size_t p) {
      const size_t begin = std::min(total, p * piece);
      const size_t end = p + 1 == pieces ? total : std::min(total, (p + 1) * piece);
      size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
      for (; i < ops.size() && starts[i] < end; ++i) {
        run_part(ops[i], std::max(begin, starts[i]) - starts[i], std::min(end, starts[i + 1]) - starts[i]);
      }
    });
  });
}

}  // namespace ferry
