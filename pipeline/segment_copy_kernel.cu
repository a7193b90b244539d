// The gather kernel of the dataset cache (Note [dataset cache] in dataset_cache.h): copies and fills
// CopySegments on a stream. Compiled only in GPU builds with a CUDA compiler; no libtorch here.
#include <algorithm>

#include <cuda_runtime_api.h>

#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/segment_copy.h"

namespace ferry::detail {
namespace {

// A launch's segments, in its parameters. Two sizes: a small batch's launch does not pass 24 KiB of
// parameters to use 2 KiB of them.
template <size_t N>
struct SegmentLaunch {
  CopySegment segments[N];
};
constexpr size_t kSmallLaunch = 64;
static_assert(sizeof(SegmentLaunch<kSegmentsPerLaunch>) <= 32000,
              "a launch's segments must fit the 32 KiB of kernel parameters");

// Copies bytes [begin, end) of a segment in words of W bytes where target and source agree modulo W,
// the unaligned head and tail byte by byte. `rank`/`ranks`: this thread among the segment's threads.
template <typename Word>
__device__ void copy_words(std::byte* target, const std::byte* source, uint64_t bytes, uint64_t rank, uint64_t ranks) {
  constexpr uint64_t W = sizeof(Word);
  const uint64_t misalign = reinterpret_cast<uintptr_t>(target) % W;
  const uint64_t head = misalign == 0 ? 0 : (W - misalign < bytes ? W - misalign : bytes);
  const uint64_t words = (bytes - head) / W;
  for (uint64_t i = rank; i < head; i += ranks) target[i] = source[i];
  auto* target_words = reinterpret_cast<Word*>(target + head);
  const auto* source_words = reinterpret_cast<const Word*>(source + head);
  for (uint64_t i = rank; i < words; i += ranks) target_words[i] = source_words[i];
  for (uint64_t i = head + words * W + rank; i < bytes; i += ranks) target[i] = source[i];
}

template <size_t N>
__global__ void copy_segments(const SegmentLaunch<N> launch) {
  const CopySegment& segment = launch.segments[blockIdx.y];
  const uint64_t rank = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const uint64_t ranks = uint64_t{gridDim.x} * blockDim.x;
  if (segment.copy_bytes != 0) {
    const auto apart = reinterpret_cast<uintptr_t>(segment.target) ^ reinterpret_cast<uintptr_t>(segment.source);
    if (apart % 16 == 0) {
      copy_words<uint4>(segment.target, segment.source, segment.copy_bytes, rank, ranks);
    } else if (apart % 8 == 0) {
      copy_words<uint2>(segment.target, segment.source, segment.copy_bytes, rank, ranks);
    } else if (apart % 4 == 0) {
      copy_words<uint32_t>(segment.target, segment.source, segment.copy_bytes, rank, ranks);
    } else if (apart % 2 == 0) {  // uint16 tokens: 2049 of them make every other sample 2-byte aligned only
      copy_words<uint16_t>(segment.target, segment.source, segment.copy_bytes, rank, ranks);
    } else {
      copy_words<unsigned char>(segment.target, segment.source, segment.copy_bytes, rank, ranks);
    }
  }
  // The fill starts on an element boundary (copy_bytes is whole elements), so byte i is the
  // pattern's byte i % element_bytes. Fills are padding and lengths: small, bytes will do.
  std::byte* fill = segment.target + segment.copy_bytes;
  const auto* pattern = reinterpret_cast<const std::byte*>(&segment.pattern);  // not std::array's host-only []
  for (uint64_t i = rank; i < segment.fill_bytes; i += ranks) fill[i] = pattern[i % segment.element_bytes];
}

template <size_t N>
void launch(const CopySegment* segments, size_t count, CudaStreamHandle stream) {
  SegmentLaunch<N> launch;
  uint64_t largest = 0;
  for (size_t i = 0; i < count; ++i) {
    launch.segments[i] = segments[i];
    largest = std::max<uint64_t>(largest, segments[i].copy_bytes + segments[i].fill_bytes);
  }
  // Enough blocks per segment that each thread moves about 4 words of 16 bytes; at most 64.
  constexpr unsigned kThreads = 256;
  const uint64_t per_block = uint64_t{kThreads} * 16 * 4;
  const unsigned blocks =
      static_cast<unsigned>(std::min<uint64_t>(64, std::max<uint64_t>(1, (largest + per_block - 1) / per_block)));
  copy_segments<N><<<dim3(blocks, static_cast<unsigned>(count)), kThreads, 0, stream>>>(launch);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_segment_kernel(const CopySegment* segments, size_t count, CudaStreamHandle stream) {
  if (count == 0) return;
  if (count <= kSmallLaunch) {
    launch<kSmallLaunch>(segments, count, stream);
  } else {
    launch<kSegmentsPerLaunch>(segments, count, stream);
  }
}

}  // namespace ferry::detail
