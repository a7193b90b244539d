#include <ferry/pipeline/buffer_carver.h>

#include <algorithm>
#include <random>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace ferry {
namespace {

// Counts the allocations the carver asks for; CPU tensors stand in for device memory.
struct CountingAllocator {
  std::vector<size_t> sizes;
  std::function<at::Tensor(size_t)> function() {
    return [this](size_t bytes) {
      sizes.push_back(bytes);
      return at::empty({static_cast<int64_t>(bytes)}, at::kByte);
    };
  }
};

TEST(BufferCarver, SmallBuffersAreAlignedDisjointSlicesOfOneChunkWhileItLasts) {
  CountingAllocator allocator;
  BufferCarver carver(allocator.function());
  std::mt19937_64 random(14);
  std::vector<at::Tensor> taken;
  size_t used = 0;  // of the current chunk, as the carver counts it
  for (int i = 0; i < 400; ++i) {
    const size_t bytes = 1 + random() % BufferCarver::kMaxPiece;
    const size_t chunks_before = allocator.sizes.size();
    at::Tensor buffer = carver.take(bytes);
    const size_t rounded = (bytes + BufferCarver::kAlignment - 1) / BufferCarver::kAlignment * BufferCarver::kAlignment;
    const bool fresh = i == 0 || used + rounded > BufferCarver::kChunkBytes;
    EXPECT_EQ(allocator.sizes.size(), chunks_before + (fresh ? 1 : 0)) << "take " << i;
    used = (fresh ? 0 : used) + rounded;
    ASSERT_EQ(buffer.dim(), 1);
    ASSERT_EQ(buffer.scalar_type(), at::kByte);
    EXPECT_EQ(static_cast<size_t>(buffer.numel()), bytes);
    EXPECT_EQ(static_cast<size_t>(buffer.storage().nbytes()), BufferCarver::kChunkBytes);
    EXPECT_EQ(buffer.storage_offset() % static_cast<int64_t>(BufferCarver::kAlignment), 0);
    EXPECT_EQ(static_cast<size_t>(buffer.storage_offset()) + rounded, used);
    buffer.fill_(static_cast<uint8_t>(i));
    taken.push_back(buffer);
  }
  EXPECT_TRUE(std::all_of(allocator.sizes.begin(), allocator.sizes.end(),
                          [](size_t n) { return n == BufferCarver::kChunkBytes; }));
  EXPECT_GT(allocator.sizes.size(), 10u);
  // Every slice still holds what was written into it: none overlaps another.
  for (size_t i = 0; i < taken.size(); ++i) {
    EXPECT_TRUE(taken[i].eq(static_cast<uint8_t>(i)).all().item<bool>()) << "slice " << i;
  }
}

TEST(BufferCarver, LargeAndEmptyBuffersAreAllocationsOfTheirOwn) {
  CountingAllocator allocator;
  BufferCarver carver(allocator.function());
  const at::Tensor large = carver.take(BufferCarver::kMaxPiece + 1);
  EXPECT_EQ(static_cast<size_t>(large.storage().nbytes()), BufferCarver::kMaxPiece + 1);
  EXPECT_EQ(large.storage_offset(), 0);
  const at::Tensor empty = carver.take(0);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(allocator.sizes, (std::vector<size_t>{BufferCarver::kMaxPiece + 1, 0}));
  // A small one after them starts a chunk.
  const at::Tensor small = carver.take(100);
  EXPECT_EQ(allocator.sizes.back(), BufferCarver::kChunkBytes);
}

TEST(BufferCarver, AChunkLivesAsLongAsAnySliceOfItAndNoLonger) {
  int made = 0;
  int freed = 0;
  BufferCarver carver([&](size_t bytes) {
    ++made;
    auto* memory = new uint8_t[bytes];
    return at::from_blob(
        memory, {static_cast<int64_t>(bytes)},
        [&freed](void* data) {
          delete[] static_cast<uint8_t*>(data);
          ++freed;
        },
        at::kByte);
  });
  at::Tensor first = carver.take(1000);
  // Fill the chunk so that the next take starts another: the carver lets go of the first one.
  while (made == 1) (void)carver.take(BufferCarver::kMaxPiece);
  EXPECT_EQ(freed, 0) << "a slice keeps its chunk";
  first = at::Tensor();
  EXPECT_EQ(freed, 1) << "the chunk is freed with its last slice";
}

}  // namespace
}  // namespace ferry
