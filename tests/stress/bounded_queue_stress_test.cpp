#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/pipeline/bounded_queue.h>

namespace ferry {
namespace {

struct Shape {
  int producers;
  int consumers;
  size_t capacity;
};

class BoundedQueueStress : public ::testing::TestWithParam<Shape> {};

// Every value pushed is popped exactly once, and the queue never holds more than its capacity —
// checked by the queue's own exact count and by a watcher thread sampling it throughout.
TEST_P(BoundedQueueStress, BoundHoldsAndNothingIsLostOrDuplicated) {
  const Shape shape = GetParam();
  constexpr int kPerProducer = 20000;
  BoundedQueue<int> queue(shape.capacity);
  std::vector<std::atomic<int>> seen(static_cast<size_t>(shape.producers) * kPerProducer);
  std::atomic<int> popped{0};
  std::atomic<bool> done{false};
  std::atomic<size_t> over_capacity{0};

  std::thread watcher([&] {
    while (!done.load()) {
      if (queue.size() > shape.capacity) over_capacity.fetch_add(1);
    }
  });
  std::vector<std::thread> threads;
  for (int p = 0; p < shape.producers; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) ASSERT_EQ(queue.push(p * kPerProducer + i), QueueStatus::kOk);
    });
  }
  const int total = shape.producers * kPerProducer;
  for (int c = 0; c < shape.consumers; ++c) {
    threads.emplace_back([&] {
      while (popped.load() < total) {
        int value = -1;
        if (queue.pop(value, std::chrono::milliseconds(5)) != QueueStatus::kOk) continue;
        if (queue.size() > shape.capacity) over_capacity.fetch_add(1);
        seen[static_cast<size_t>(value)].fetch_add(1);
        popped.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  done.store(true);
  watcher.join();

  EXPECT_EQ(popped.load(), total);
  for (size_t v = 0; v < seen.size(); ++v) ASSERT_EQ(seen[v].load(), 1) << "value " << v;
  EXPECT_EQ(over_capacity.load(), 0u);
  EXPECT_LE(queue.peak_size(), shape.capacity);
  EXPECT_GE(queue.peak_size(), 1u);
  EXPECT_EQ(queue.size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(ThreadCounts, BoundedQueueStress,
                         ::testing::Values(Shape{1, 1, 1}, Shape{2, 2, 4}, Shape{4, 4, 3}, Shape{8, 8, 1},
                                           Shape{8, 8, 8}, Shape{8, 8, 64}, Shape{8, 1, 16}, Shape{1, 8, 16}),
                         [](const auto& param_info) {
                           return std::to_string(param_info.param.producers) + "x" +
                                  std::to_string(param_info.param.consumers) + "_cap" +
                                  std::to_string(param_info.param.capacity);
                         });

}  // namespace
}  // namespace ferry
