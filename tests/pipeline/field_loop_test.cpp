#include <ferry/pipeline/field_loop.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <oneapi/tbb/task_arena.h>

namespace ferry {
namespace {

class FieldLoop : public ::testing::TestWithParam<int> {};

// Every index once, narrow (on the caller's thread, in order) and wide (spread), in arenas of 1 to 8 threads.
TEST_P(FieldLoop, VisitsEveryFieldOnce) {
  tbb::task_arena arena(GetParam());
  arena.execute([] {
    for (size_t count : {size_t{0}, size_t{1}, kWideBatchFields - 1, kWideBatchFields, kWideBatchFields + 1,
                         size_t{1000}, size_t{10007}}) {
      std::vector<std::atomic<int>> visits(count);
      std::vector<size_t> order;
      const bool narrow = count < kWideBatchFields;
      for_each_field(count, [&](size_t i) {
        visits[i].fetch_add(1, std::memory_order_relaxed);
        if (narrow) order.push_back(i);
      });
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(visits[i].load(), 1) << "field " << i << " of " << count;
      if (narrow) {
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(order[i], i) << "a narrow batch's fields go in order";
      }
    }
  });
}

// Whichever thread meets its failure first, the error rethrown is the lowest failing field's.
TEST_P(FieldLoop, RethrowsTheLowestFailingField) {
  tbb::task_arena arena(GetParam());
  arena.execute([] {
    for (size_t count : {size_t{100}, size_t{5000}}) {
      for (int round = 0; round < 20; ++round) {
        const std::vector<size_t> failing = {count - 1, count / 2 + static_cast<size_t>(round), count / 3,
                                             count / 3 + 1};
        try {
          for_each_field(count, [&](size_t i) {
            for (size_t f : failing) {
              if (i == f) throw std::runtime_error("field " + std::to_string(i));
            }
          });
          FAIL() << "no exception";
        } catch (const std::runtime_error& e) {
          EXPECT_EQ(std::string(e.what()), "field " + std::to_string(count / 3)) << count << " fields";
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Threads, FieldLoop, ::testing::Values(1, 2, 4, 8),
                         [](const auto& param_info) { return "threads" + std::to_string(param_info.param); });

}  // namespace
}  // namespace ferry
