#include <ferry/pipeline/bounded_queue.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace ferry {
namespace {

using namespace std::chrono_literals;

TEST(BoundedQueue, DeliversInFifoOrderFromOneProducer) {
  BoundedQueue<int> queue(8);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(queue.try_push(int{i}), QueueStatus::kOk);
  for (int i = 0; i < 8; ++i) {
    int out = -1;
    ASSERT_EQ(queue.try_pop(out), QueueStatus::kOk);
    EXPECT_EQ(out, i);
  }
}

TEST(BoundedQueue, RefusesPushBeyondCapacityAndKeepsTheItem) {
  BoundedQueue<std::string> queue(2);
  ASSERT_EQ(queue.try_push("a"), QueueStatus::kOk);
  ASSERT_EQ(queue.try_push("b"), QueueStatus::kOk);
  std::string third = "c";
  EXPECT_EQ(queue.push(std::move(third), 20ms), QueueStatus::kTimeout);
  EXPECT_EQ(third, "c");  // not moved from
  EXPECT_EQ(queue.size(), 2u);
  EXPECT_EQ(queue.peak_size(), 2u);
}

TEST(BoundedQueue, PopTimesOutWhenEmpty) {
  BoundedQueue<int> queue(1);
  int out = 0;
  EXPECT_EQ(queue.pop(out, 10ms), QueueStatus::kTimeout);
  EXPECT_EQ(queue.try_pop(out), QueueStatus::kTimeout);
}

TEST(BoundedQueue, FreedSlotUnblocksAWaitingPusher) {
  BoundedQueue<int> queue(1);
  ASSERT_EQ(queue.try_push(1), QueueStatus::kOk);
  auto pusher = std::async(std::launch::async, [&] { return queue.push(2); });
  EXPECT_EQ(pusher.wait_for(50ms), std::future_status::timeout);  // blocked: the queue is full
  int out = 0;
  ASSERT_EQ(queue.pop(out), QueueStatus::kOk);
  EXPECT_EQ(out, 1);
  EXPECT_EQ(pusher.get(), QueueStatus::kOk);
  ASSERT_EQ(queue.pop(out), QueueStatus::kOk);
  EXPECT_EQ(out, 2);
}

TEST(BoundedQueue, CloseWakesEveryBlockedPopper) {
  BoundedQueue<int> queue(4);
  std::vector<std::future<QueueStatus>> poppers;
  for (int i = 0; i < 6; ++i) {
    poppers.push_back(std::async(std::launch::async, [&] {
      int out = 0;
      return queue.pop(out);
    }));
  }
  std::this_thread::sleep_for(30ms);
  queue.close();
  for (auto& popper : poppers) {
    ASSERT_EQ(popper.wait_for(2s), std::future_status::ready);
    EXPECT_EQ(popper.get(), QueueStatus::kClosed);
  }
}

TEST(BoundedQueue, CloseWakesEveryBlockedPusher) {
  BoundedQueue<int> queue(1);
  ASSERT_EQ(queue.try_push(0), QueueStatus::kOk);
  std::vector<std::future<QueueStatus>> pushers;
  for (int i = 0; i < 6; ++i) pushers.push_back(std::async(std::launch::async, [&, i] { return queue.push(int{i}); }));
  std::this_thread::sleep_for(30ms);
  queue.close();
  for (auto& pusher : pushers) {
    ASSERT_EQ(pusher.wait_for(2s), std::future_status::ready);
    EXPECT_EQ(pusher.get(), QueueStatus::kClosed);
  }
  EXPECT_LE(queue.size(), 1u);
}

TEST(BoundedQueue, PoppersDrainWhatOneProducerPushedBeforeClosing) {
  BoundedQueue<int> queue(4);
  ASSERT_EQ(queue.try_push(7), QueueStatus::kOk);
  ASSERT_EQ(queue.try_push(8), QueueStatus::kOk);
  queue.close();
  int out = 0;
  EXPECT_EQ(queue.try_push(9), QueueStatus::kClosed);
  ASSERT_EQ(queue.pop(out), QueueStatus::kOk);
  EXPECT_EQ(out, 7);
  ASSERT_EQ(queue.pop(out), QueueStatus::kOk);
  EXPECT_EQ(out, 8);
  EXPECT_EQ(queue.pop(out), QueueStatus::kClosed);
  EXPECT_EQ(queue.pop(out), QueueStatus::kClosed);  // the marker is passed on, every time
}

// Successive pushes from different threads (taking turns, as a serial oneTBB node's calls do) come
// out in push order when they go through one Producer.
TEST(BoundedQueue, ProducerKeepsPushOrderAcrossThreads) {
  constexpr int kItems = 20000;
  constexpr int kThreads = 4;
  BoundedQueue<int> queue(16);
  BoundedQueue<int>::Producer lane = queue.make_producer();
  std::atomic<int> turn{0};
  std::vector<std::thread> pushers;
  for (int t = 0; t < kThreads; ++t) {
    pushers.emplace_back([&, t] {
      for (int i = t; i < kItems; i += kThreads) {
        while (turn.load(std::memory_order_acquire) != i) std::this_thread::yield();
        ASSERT_EQ(lane.push(int{i}), QueueStatus::kOk);
        turn.store(i + 1, std::memory_order_release);
      }
    });
  }
  for (int expected = 0; expected < kItems; ++expected) {
    int out = -1;
    ASSERT_EQ(queue.pop(out, 5s), QueueStatus::kOk);
    ASSERT_EQ(out, expected);
  }
  for (auto& pusher : pushers) pusher.join();
}

TEST(BoundedQueue, HoldsMoveOnlyItems) {
  BoundedQueue<std::unique_ptr<int>> queue(2);
  ASSERT_EQ(queue.try_push(std::make_unique<int>(5)), QueueStatus::kOk);
  std::unique_ptr<int> out;
  ASSERT_EQ(queue.try_pop(out), QueueStatus::kOk);
  ASSERT_TRUE(out);
  EXPECT_EQ(*out, 5);
}

TEST(BoundedQueue, RejectsZeroCapacity) { EXPECT_THROW(BoundedQueue<int>(0), std::invalid_argument); }

}  // namespace
}  // namespace ferry
