#include "io/batch_planner.h"

#include <gtest/gtest.h>

#include "io/sequential_sampler.h"
#include "pipeline/error.h"

namespace ferry {
namespace {

std::vector<BatchPlan> all(BatchPlanner& planner) {
  std::vector<BatchPlan> plans;
  while (auto plan = planner.next()) plans.push_back(std::move(*plan));
  EXPECT_FALSE(planner.next());  // stays exhausted
  return plans;
}

TEST(BatchPlanner, CutsEpochsIntoBatchesKeepingTheShortLastOne) {
  BatchPlanner planner(std::make_shared<SequentialSampler>(10), {4, false, 2, 0});
  EXPECT_EQ(planner.batches_per_epoch(), 3u);
  EXPECT_EQ(planner.total_batches(), 6u);
  const auto plans = all(planner);
  ASSERT_EQ(plans.size(), 6u);
  EXPECT_EQ(plans[0].sample_indices, (std::vector<uint64_t>{0, 1, 2, 3}));
  EXPECT_EQ(plans[2].sample_indices, (std::vector<uint64_t>{8, 9}));
  EXPECT_EQ(plans[3].epoch, 1u);
  EXPECT_EQ(plans[3].index, 0u);
  EXPECT_EQ(plans[5].index, 2u);
}

TEST(BatchPlanner, DropsTheShortLastBatchWhenAsked) {
  BatchPlanner planner(std::make_shared<SequentialSampler>(10), {4, true, 1, 0});
  const auto plans = all(planner);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[1].sample_indices, (std::vector<uint64_t>{4, 5, 6, 7}));
}

TEST(BatchPlanner, StopsAtMaxBatchesAcrossEpochs) {
  BatchPlanner planner(std::make_shared<SequentialSampler>(5), {2, false, 10, 7});
  EXPECT_EQ(planner.total_batches(), 7u);
  const auto plans = all(planner);
  ASSERT_EQ(plans.size(), 7u);
  EXPECT_EQ(plans[6].epoch, 2u);
  EXPECT_EQ(plans[6].sample_indices, (std::vector<uint64_t>{0, 1}));
}

TEST(BatchPlanner, PlansNothingForAnEmptyOrTooSmallEpoch) {
  BatchPlanner empty(std::make_shared<SequentialSampler>(0), {4, false, 3, 0});
  EXPECT_TRUE(all(empty).empty());
  BatchPlanner small(std::make_shared<SequentialSampler>(3), {4, true, 3, 0});
  EXPECT_TRUE(all(small).empty());
  EXPECT_THROW(BatchPlanner(std::make_shared<SequentialSampler>(3), {0, false, 1, 0}), Error);
}

}  // namespace
}  // namespace ferry
