#include <ferry/stages/parallel_copy.h>

#include <cstring>
#include <random>

#include <gtest/gtest.h>
#include <oneapi/tbb/task_arena.h>

namespace ferry {
namespace {

// Random copies and pattern fills (odd sizes, 1/2/4/8-byte elements) laid end to end; the parallel
// cut must give exactly what a serial run gives, however the pieces fall.
TEST(ParallelCopy, ParallelRunEqualsSerialRunForRandomOps) {
  std::mt19937_64 rng(99);
  for (int threads : {1, 2, 4, 8}) {
    tbb::task_arena arena(threads);
    for (int round = 0; round < 20; ++round) {
      std::vector<std::byte> source(1 << 20);
      for (auto& b : source) b = std::byte(rng() & 0xff);
      std::vector<CopyOp> serial_ops;
      std::vector<CopyOp> parallel_ops;
      std::vector<std::byte> serial(3 << 20, std::byte{0xee});
      std::vector<std::byte> parallel(3 << 20, std::byte{0xee});
      size_t at = 0;
      while (true) {
        const size_t element = size_t{1} << (rng() % 4);
        const size_t bytes = rng() % 4 == 0 ? (rng() % 300000) : (rng() % 4000);
        if (at + bytes > serial.size() - 8) break;
        CopyOp op;
        op.element = element;
        if (rng() % 3 == 0) {
          op.bytes = bytes / element * element;
          for (size_t i = 0; i < element; ++i) op.pattern[i] = std::byte(rng() & 0xff);
          if (rng() % 4 == 0) op.pattern = {};  // zero fill takes the memset path
        } else {
          op.bytes = bytes;
          op.source = source.data() + rng() % (source.size() - bytes);
        }
        op.target = serial.data() + at;
        serial_ops.push_back(op);
        op.target = parallel.data() + at;
        parallel_ops.push_back(op);
        at += op.bytes + rng() % 3;
      }
      run_copies(serial_ops, SIZE_MAX);
      arena.execute([&] { run_copies(parallel_ops, 1); });
      ASSERT_EQ(std::memcmp(serial.data(), parallel.data(), serial.size()), 0)
          << "threads " << threads << " round " << round;
    }
  }
}

TEST(ParallelCopy, FillRepeatsThePatternElementByElement) {
  std::vector<std::byte> out(10);
  CopyOp fill;
  fill.target = out.data();
  fill.bytes = 8;
  fill.element = 4;
  fill.pattern = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  run_copies({fill}, SIZE_MAX);
  const std::byte expected[] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{1},
                                std::byte{2}, std::byte{3}, std::byte{4}, std::byte{0}, std::byte{0}};
  EXPECT_EQ(std::memcmp(out.data(), expected, 10), 0);
}

}  // namespace
}  // namespace ferry
