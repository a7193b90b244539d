#include <ferry/stages/parallel_copy.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <oneapi/tbb/task_arena.h>

namespace ferry {
namespace {

// Random copies and pattern fills (odd sizes, 1/2/4/8-byte elements) laid end to end, into `serial`
// by one thread and into `parallel` cut in pieces.
struct RandomCopies {
  std::vector<std::byte> source = std::vector<std::byte>(1 << 20);
  std::vector<std::byte> serial = std::vector<std::byte>(3 << 20, std::byte{0xee});
  std::vector<std::byte> parallel = std::vector<std::byte>(3 << 20, std::byte{0xee});
  std::vector<CopyOp> serial_ops;
  std::vector<CopyOp> parallel_ops;

  explicit RandomCopies(std::mt19937_64& rng) {
    for (auto& b : source) b = std::byte(rng() & 0xff);
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
  }
  void run_serial() { run_copies(serial_ops, SIZE_MAX); }
  void run_parallel() { run_copies(parallel_ops, 1); }
  bool same() const { return std::memcmp(serial.data(), parallel.data(), serial.size()) == 0; }
};

// The parallel cut must give exactly what a serial run gives, however the pieces fall, whatever arena
// the caller runs in (the copies have one of their own: Note [an arena for the copies]).
TEST(ParallelCopy, ParallelRunEqualsSerialRunForRandomOps) {
  std::mt19937_64 rng(99);
  for (int threads : {1, 2, 4, 8}) {
    tbb::task_arena arena(threads);
    for (int round = 0; round < 20; ++round) {
      RandomCopies copies(rng);
      copies.run_serial();
      arena.execute([&] { copies.run_parallel(); });
      ASSERT_TRUE(copies.same()) << "threads " << threads << " round " << round;
    }
  }
}

// Callers at once, more of them than the copy arena has slots (the extra ones wait for a slot): each
// gets its own bytes, and all of them.
TEST(ParallelCopy, ConcurrentCallersEachGetTheirOwnBytes) {
  const size_t callers = 3 * std::max(1u, std::thread::hardware_concurrency()) + 1;
  std::vector<std::unique_ptr<RandomCopies>> copies;
  std::mt19937_64 rng(7);
  for (size_t c = 0; c < callers; ++c) {
    copies.push_back(std::make_unique<RandomCopies>(rng));
    copies.back()->run_serial();
  }
  std::vector<std::thread> threads;
  for (size_t c = 0; c < callers; ++c) {
    threads.emplace_back([&, c] {
      for (int round = 0; round < 3; ++round) copies[c]->run_parallel();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t c = 0; c < callers; ++c) EXPECT_TRUE(copies[c]->same()) << "caller " << c;
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
