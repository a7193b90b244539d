#include <ferry/stages/batch_planner.h>

#include <random>

#include <gtest/gtest.h>

#include <ferry/io/samplers/sequential_sampler.h>
#include <ferry/pipeline/error.h>

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

TEST(BatchPlanner, MarksEachEpochsLastPlanAndItsPositions) {
  BatchPlanner planner(std::make_shared<SequentialSampler>(10), {4, false, 2, 0});
  const auto plans = all(planner);
  ASSERT_EQ(plans.size(), 6u);
  for (size_t i = 0; i < plans.size(); ++i) {
    EXPECT_EQ(plans[i].first_position, (i % 3) * 4) << i;
    EXPECT_EQ(plans[i].last_of_epoch, i % 3 == 2) << i;
    EXPECT_EQ(plans[i].kind, BatchPlan::Kind::kSamples);
  }
}

// With refill (on_error: skip) collate cuts the batches: the planner plans every sample, drop_last's
// tail too, follows each epoch with a marker, and leaves max_batches to collate.
TEST(BatchPlanner, RefillPlansWholeEpochsWithAMarkerAfterEach) {
  BatchPlanner planner(std::make_shared<SequentialSampler>(10), {4, true, 2, 1, 0, std::nullopt, true});
  const auto plans = all(planner);
  ASSERT_EQ(plans.size(), 8u);
  for (size_t epoch = 0; epoch < 2; ++epoch) {
    const BatchPlan* p = &plans[epoch * 4];
    EXPECT_EQ(p[0].sample_indices, (std::vector<uint64_t>{0, 1, 2, 3}));
    EXPECT_EQ(p[2].sample_indices, (std::vector<uint64_t>{8, 9}));  // the tail, under drop_last
    EXPECT_TRUE(p[2].last_of_epoch);
    EXPECT_EQ(p[3].kind, BatchPlan::Kind::kEpochEnd);
    EXPECT_EQ(p[3].epoch, epoch);
  }
}

// A resumed planner starts at the saved cursor, mid-batch if skips had moved the batches on.
TEST(BatchPlanner, StartsAtACursor) {
  BatchPlanner planner(std::make_shared<SequentialSampler>(10), {4, false, 2, 0, 5, BatchCursor{1, 2, 6}, true});
  EXPECT_EQ(planner.total_batches(), 1u);
  const auto plans = all(planner);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].epoch, 1u);
  EXPECT_EQ(plans[0].index, 2u);
  EXPECT_EQ(plans[0].first_position, 6u);
  EXPECT_EQ(plans[0].sample_indices, (std::vector<uint64_t>{6, 7, 8, 9}));
  EXPECT_EQ(plans[1].kind, BatchPlan::Kind::kEpochEnd);
  // Without a cursor, first_batch counts whole batches over whole epochs.
  BatchPlanner plain(std::make_shared<SequentialSampler>(10), {4, false, 2, 0, 4});
  const auto rest = all(plain);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].epoch, 1u);
  EXPECT_EQ(rest[0].index, 1u);
  EXPECT_EQ(rest[0].first_position, 4u);
}

// Each epoch's count is what the planner plans in it: checked against the plans over random runs.
TEST(BatchPlanner, BatchesInEachEpochAreThosePlannedInIt) {
  std::mt19937_64 random(11);
  for (int run = 0; run < 400; ++run) {
    const uint64_t samples = random() % 23;
    const size_t batch_size = 1 + random() % 6;
    const bool drop_last = random() % 2 == 0;
    const uint64_t epochs = 1 + random() % 4;
    const uint64_t max_batches = random() % 3 == 0 ? random() % 12 : 0;
    const uint64_t first_batch = random() % 3 == 0 ? random() % 6 : 0;
    SCOPED_TRACE("samples " + std::to_string(samples) + ", batch " + std::to_string(batch_size) +
                 (drop_last ? " drop_last" : "") + ", epochs " + std::to_string(epochs) + ", max_batches " +
                 std::to_string(max_batches) + ", first_batch " + std::to_string(first_batch));
    const BatchPlanner::Options options{batch_size, drop_last, epochs, max_batches, first_batch};
    BatchPlanner planner(std::make_shared<SequentialSampler>(samples), options);
    std::vector<uint64_t> planned(epochs + 1, 0);
    for (const BatchPlan& plan : all(planner)) ++planned.at(plan.epoch);
    uint64_t sum = 0;
    for (uint64_t epoch = 0; epoch <= epochs; ++epoch) {
      EXPECT_EQ(planner.batches_in_epoch(epoch), planned[epoch]) << "epoch " << epoch;
      sum += planner.batches_in_epoch(epoch);
    }
    EXPECT_EQ(sum, planner.total_batches());
    const uint64_t per_epoch = planner.batches_per_epoch();
    EXPECT_EQ(planner.first_epoch(), per_epoch == 0 ? 0 : first_batch / per_epoch);
  }
}

}  // namespace
}  // namespace ferry
