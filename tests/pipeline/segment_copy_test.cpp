// copy_segments_on_host(), and the gather kernel against it (on a GPU; it skips elsewhere, saying why):
// random segments with every alignment, copy and fill sizes, and element size, every byte compared.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/build_config.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/segment_copy.h>

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

struct Case {
  std::vector<std::byte> source;
  std::vector<std::byte> expected;    // the target after the segments
  std::vector<CopySegment> segments;  // with offsets (into source and target) in place of pointers
};

// Random, non-overlapping segments over a target of `target_bytes`; pointers are offsets from 0.
Case random_case(std::mt19937_64& random, size_t count, size_t target_bytes) {
  Case c;
  c.source.resize(target_bytes);
  for (auto& b : c.source) b = static_cast<std::byte>(random());
  c.expected.assign(target_bytes, std::byte{0xEE});
  size_t cursor = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint32_t element = uint32_t{1} << std::uniform_int_distribution<int>(0, 3)(random);
    const size_t gap = std::uniform_int_distribution<size_t>(0, 40)(random);
    const size_t copy = element * std::uniform_int_distribution<size_t>(0, i % 7 == 0 ? 20000 : 300)(random);
    const size_t fill = element * std::uniform_int_distribution<size_t>(0, i % 5 == 0 ? 0 : 50)(random);
    const size_t target = cursor + gap;
    if (target + copy + fill > target_bytes) break;
    const size_t from = std::uniform_int_distribution<size_t>(0, target_bytes - copy)(random);
    CopySegment segment;
    segment.target = reinterpret_cast<std::byte*>(target);
    segment.source = reinterpret_cast<const std::byte*>(from);
    segment.copy_bytes = copy;
    segment.fill_bytes = fill;
    segment.element_bytes = element;
    for (auto& b : segment.pattern) b = static_cast<std::byte>(random());
    std::memcpy(c.expected.data() + target, c.source.data() + from, copy);
    for (size_t k = 0; k < fill; ++k) c.expected[target + copy + k] = segment.pattern[k % element];
    c.segments.push_back(segment);
    cursor = target + copy + fill;
  }
  return c;
}

std::vector<CopySegment> placed(const Case& c, std::byte* target, const std::byte* source) {
  std::vector<CopySegment> segments = c.segments;
  for (CopySegment& segment : segments) {
    segment.target = target + reinterpret_cast<uintptr_t>(segment.target);
    segment.source = source + reinterpret_cast<uintptr_t>(segment.source);
  }
  return segments;
}

TEST(SegmentCopy, OnTheHostEveryByteIsCopiedOrFilled) {
  std::mt19937_64 random(11);
  for (int round = 0; round < 40; ++round) {
    const Case c = random_case(random, 1 + round * 5, 1 << 20);
    std::vector<std::byte> target(c.expected.size(), std::byte{0xEE});
    copy_segments_on_host(placed(c, target.data(), c.source.data()));
    ASSERT_EQ(std::memcmp(target.data(), c.expected.data(), target.size()), 0) << "round " << round;
  }
}

TEST(SegmentCopy, TheKernelMatchesTheHost) {
  if (const std::string why = segment_kernel_reason(); !why.empty()) GTEST_SKIP() << why;
  if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
#if FERRY_HAVE_CUDART
  std::mt19937_64 random(12);
  const size_t bytes = 4 << 20;
  void* source_memory = nullptr;
  void* target_memory = nullptr;
  ASSERT_EQ(cudaMalloc(&source_memory, bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&target_memory, bytes), cudaSuccess);
  auto* source = static_cast<std::byte*>(source_memory);
  auto* target = static_cast<std::byte*>(target_memory);
  // Up to 1190 segments: launches of both sizes, and several of kSegmentsPerLaunch; offsets of any alignment.
  for (int round = 0; round < 30; ++round) {
    const Case c = random_case(random, 1 + round * 41, bytes);
    std::vector<std::byte> got(bytes, std::byte{0xEE});
    ASSERT_EQ(cudaMemcpy(source, c.source.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(target, got.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    copy_segments_on_device(placed(c, target, source), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), target, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(std::memcmp(got.data(), c.expected.data(), bytes), 0) << "round " << round;
  }
  cudaFree(source);
  cudaFree(target);
#endif
}

}  // namespace
}  // namespace ferry
