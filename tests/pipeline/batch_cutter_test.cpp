// BatchCutter on its own (Note [refilling batches]): plans and decoded samples in, batches, tokens and
// markers out, checked against a plain model of the rules over random epochs, batch sizes and failures.
#include <ferry/pipeline/batch_cutter.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/pipeline/error.h>

namespace ferry::detail {
namespace {

using Kind = BatchWork::Kind;

// A plan of `indices` (sample i of the source at epoch position first_position + i).
std::shared_ptr<const BatchPlan> samples_plan(uint64_t sequence, uint64_t epoch, uint64_t index,
                                              uint64_t first_position, std::vector<uint64_t> indices,
                                              bool last_of_epoch) {
  auto plan = std::make_shared<BatchPlan>();
  plan->kind = BatchPlan::Kind::kSamples;
  plan->sequence = sequence;
  plan->epoch = epoch;
  plan->index = index;
  plan->first_position = first_position;
  plan->sample_indices = std::move(indices);
  plan->last_of_epoch = last_of_epoch;
  return plan;
}

std::shared_ptr<const BatchPlan> marker_plan(uint64_t sequence, BatchPlan::Kind kind, uint64_t epoch = 0) {
  auto plan = std::make_shared<BatchPlan>();
  plan->kind = kind;
  plan->sequence = sequence;
  plan->epoch = epoch;
  if (kind == BatchPlan::Kind::kError) plan->error = Error(ErrorContext{"source", {}, {}, {}}, "planner broke");
  return plan;
}

// Feeds every sample slot of `plan` to the cutter, the positions in `failed` decoded with an error;
// returns what the plan's last sample gave (earlier ones give nothing).
BatchCutter::Cut feed(BatchCutter& cutter, const std::shared_ptr<const BatchPlan>& plan,
                      const std::set<uint64_t>& failed = {}) {
  BatchCutter::Cut last;
  for (size_t position = 0; position < plan->slots(); ++position) {
    auto sample = std::make_shared<SampleWork>();
    sample->plan = plan;
    sample->position = static_cast<uint32_t>(position);
    if (plan->kind == BatchPlan::Kind::kSamples && failed.count(plan->sample_indices[position]) != 0) {
      sample->error =
          Error(ErrorContext{"decode", plan->sample_indices[position], plan->epoch, plan->index}, "cannot decode");
    }
    BatchCutter::Cut cut = cutter.add(std::move(sample));
    if (position + 1 < plan->slots()) {
      EXPECT_TRUE(cut.items.empty()) << "items before the plan was complete";
    } else {
      last = std::move(cut);
    }
  }
  return last;
}

std::vector<uint64_t> indices_of(const BatchWork& work) { return work.info.sample_indices; }

TEST(BatchCutter, WithoutSkipsEveryPlanIsOneBatchNumberedInOrder) {
  BatchCutter cutter(BatchCutter::Options{.batch_size = 3});
  // One epoch of 7 samples: plans of 3, 3 and the last 1.
  const std::vector<std::vector<uint64_t>> plans{{10, 11, 12}, {13, 14, 15}, {16}};
  uint64_t position = 0;
  for (uint64_t i = 0; i < plans.size(); ++i) {
    const bool last = i + 1 == plans.size();
    const BatchCutter::Cut cut = feed(cutter, samples_plan(i, 0, i, position, plans[i], last));
    position += plans[i].size();
    ASSERT_EQ(cut.items.size(), 1u);
    const BatchWork& work = *cut.items[0];
    EXPECT_EQ(work.kind, Kind::kBatch);
    EXPECT_EQ(work.sequence, i);
    EXPECT_EQ(work.info.sequence, i);
    EXPECT_EQ(work.info.epoch, 0u);
    EXPECT_EQ(work.info.index, i);
    EXPECT_EQ(indices_of(work), plans[i]);
    EXPECT_EQ(work.samples.size(), plans[i].size());
    // Where the batch after it starts: the next position, or the next epoch's start after the last.
    EXPECT_EQ(work.next.epoch, last ? 1u : 0u);
    EXPECT_EQ(work.next.index, last ? 0u : i + 1);
    EXPECT_EQ(work.next.position, last ? 0u : position);
    EXPECT_TRUE(cut.skipped.empty());
  }
  const BatchCutter::Cut end = feed(cutter, marker_plan(3, BatchPlan::Kind::kEnd));
  ASSERT_EQ(end.items.size(), 1u);
  EXPECT_EQ(end.items[0]->kind, Kind::kEnd);
  EXPECT_EQ(end.items[0]->sequence, 3u);
  EXPECT_TRUE(cutter.ended());
}

TEST(BatchCutter, UnderFailAFailedSampleBecomesTheItemInItsBatchsPlace) {
  BatchCutter cutter(BatchCutter::Options{.batch_size = 2, .on_error = OnError::kFail});
  EXPECT_EQ(feed(cutter, samples_plan(0, 0, 0, 0, {0, 1}, false)).items.at(0)->kind, Kind::kBatch);
  const BatchCutter::Cut cut = feed(cutter, samples_plan(1, 0, 1, 2, {2, 3}, false), {3});
  ASSERT_EQ(cut.items.size(), 1u);
  EXPECT_EQ(cut.items[0]->kind, Kind::kError);
  ASSERT_TRUE(cut.items[0]->error);
  EXPECT_EQ(cut.items[0]->error->sample_index(), 3u);
  EXPECT_EQ(cut.items[0]->sequence, 1u);
}

// An epoch planned from its start that made no batch (every sample lost, or under drop_last fewer
// than batch_size kept), with another over the same samples after it, ends the run with an error
// naming the first sample lost; a resumed epoch that started part-way, the last epoch, or one whose
// next deals other samples ends as before (its rest, or a token).
TEST(BatchCutter, AWholeEpochLostWithTheSameSamplesToFollowEndsTheRun) {
  const BatchCutter::Options options{.batch_size = 2, .refill = true, .on_error = OnError::kSkip};
  const auto end_of_epoch = [](uint64_t sequence, bool same_samples_follow) {
    auto marker = std::make_shared<BatchPlan>(*marker_plan(sequence, BatchPlan::Kind::kEpochEnd));
    marker->same_samples_follow = same_samples_follow;
    return std::shared_ptr<const BatchPlan>(marker);
  };
  {
    BatchCutter cutter(options);
    EXPECT_EQ(feed(cutter, samples_plan(0, 0, 0, 0, {7, 8}, false), {7, 8}).items.at(0)->kind, Kind::kToken);
    EXPECT_EQ(feed(cutter, samples_plan(1, 0, 1, 2, {9}, true), {9}).items.at(0)->kind, Kind::kToken);
    const BatchCutter::Cut cut = feed(cutter, end_of_epoch(2, true));
    ASSERT_EQ(cut.items.size(), 1u);
    EXPECT_EQ(cut.items[0]->kind, Kind::kError);
    ASSERT_TRUE(cut.items[0]->error);
    EXPECT_EQ(cut.items[0]->error->sample_index(), 7u);
    EXPECT_EQ(cut.items[0]->error->epoch(), 0u);
    EXPECT_NE(cut.items[0]->error->cause().find("made no batch of epoch 0: it lost 3 of its 3 samples;"),
              std::string::npos)
        << cut.items[0]->error->cause();
    // What was planned after it is not cut (its skips are not the run's).
    EXPECT_TRUE(cutter.ended());
    EXPECT_TRUE(feed(cutter, samples_plan(3, 1, 0, 0, {7, 8}, false), {7}).items.empty());
  }
  for (const bool whole : {false, true}) {
    for (const bool same_samples_follow : {false, true}) {
      if (whole && same_samples_follow) continue;  // the case above
      BatchCutter cutter(options);
      (void)feed(cutter, samples_plan(0, 0, 0, whole ? 0 : 3, {7, 8}, true), {7, 8});
      const BatchCutter::Cut cut = feed(cutter, end_of_epoch(1, same_samples_follow));
      ASSERT_EQ(cut.items.size(), 1u);
      EXPECT_EQ(cut.items[0]->kind, Kind::kToken) << "whole " << whole << ", same samples " << same_samples_follow;
    }
  }
  {
    BatchCutter::Options drop = options;
    drop.drop_last = true;
    BatchCutter cutter(drop);
    (void)feed(cutter, samples_plan(0, 0, 0, 0, {7, 8, 9}, true), {7, 9});
    const BatchCutter::Cut cut = feed(cutter, end_of_epoch(1, true));
    ASSERT_EQ(cut.items.size(), 1u);
    EXPECT_EQ(cut.items[0]->kind, Kind::kError);
    EXPECT_NE(cut.items[0]->error->cause().find(
                  "it lost 2 of its 3 samples, and drop_last drops the 1 left (fewer than batch_size 2);"),
              std::string::npos)
        << cut.items[0]->error->cause();
  }
  // One sample kept is enough without drop_last: its epoch ends with it as the smaller batch.
  BatchCutter cutter(options);
  (void)feed(cutter, samples_plan(0, 0, 0, 0, {7, 8, 9}, true), {7, 9});
  const BatchCutter::Cut cut = feed(cutter, end_of_epoch(1, true));
  ASSERT_EQ(cut.items.size(), 1u);
  EXPECT_EQ(cut.items[0]->kind, Kind::kBatch);
  EXPECT_EQ(indices_of(*cut.items[0]), std::vector<uint64_t>{8});
}

TEST(BatchCutter, PlanningErrorsAndUnskippableSamplesEndTheRunEvenUnderSkip) {
  BatchCutter::Options options{.batch_size = 2, .refill = true, .on_error = OnError::kSkip};
  {
    BatchCutter cutter(options);
    const BatchCutter::Cut cut = feed(cutter, marker_plan(0, BatchPlan::Kind::kError));
    ASSERT_EQ(cut.items.size(), 1u);
    EXPECT_EQ(cut.items[0]->kind, Kind::kError);
    EXPECT_EQ(cut.items[0]->error->cause(), "planner broke");
  }
  BatchCutter cutter(options);
  auto plan = samples_plan(0, 0, 0, 0, {4, 5}, false);
  auto good = std::make_shared<SampleWork>();
  good->plan = plan;
  EXPECT_TRUE(cutter.add(good).items.empty());
  auto hopeless = std::make_shared<SampleWork>();
  hopeless->plan = plan;
  hopeless->position = 1;
  hopeless->error = Error("no replacement found");
  hopeless->unskippable = true;
  const BatchCutter::Cut cut = cutter.add(hopeless);
  ASSERT_EQ(cut.items.size(), 1u);
  EXPECT_EQ(cut.items[0]->kind, Kind::kError);
}

TEST(BatchCutter, ReplacedSamplesAreReportedAsSkippedInOrder) {
  BatchCutter cutter(BatchCutter::Options{.batch_size = 2, .on_error = OnError::kSkip});
  auto plan = samples_plan(0, 0, 0, 0, {7, 8}, false);
  for (uint32_t position = 0; position < 2; ++position) {
    auto sample = std::make_shared<SampleWork>();
    sample->plan = plan;
    sample->position = position;
    if (position == 1) {  // sample 8 failed, then 9; 10 took its place
      sample->skipped = {SkippedSample{8, "k8", "decode", "bad"}, SkippedSample{9, "k9", "decode", "bad too"}};
      sample->replacement = 10;
    }
    const BatchCutter::Cut cut = cutter.add(sample);
    if (position == 1) {
      ASSERT_EQ(cut.skipped.size(), 2u);
      EXPECT_EQ(cut.skipped[0].index, 8u);
      EXPECT_EQ(cut.skipped[1].index, 9u);
      ASSERT_EQ(cut.items.size(), 1u);
      EXPECT_EQ(indices_of(*cut.items[0]), (std::vector<uint64_t>{7, 10}));
    }
  }
}

TEST(BatchCutter, RefusesASampleOfAnotherPlanBeforeTheFirstIsComplete) {
  BatchCutter cutter(BatchCutter::Options{.batch_size = 2});
  auto first = std::make_shared<SampleWork>();
  first->plan = samples_plan(0, 0, 0, 0, {0, 1}, false);
  (void)cutter.add(first);
  auto stray = std::make_shared<SampleWork>();
  stray->plan = samples_plan(1, 0, 1, 2, {2, 3}, false);
  EXPECT_THROW(cutter.add(stray), Error);
}

TEST(BatchCutter, RefusesABatchSizeOfZero) { EXPECT_THROW(BatchCutter(BatchCutter::Options{.batch_size = 0}), Error); }

// Without refill every plan is its batch; an epoch's short last plan is that epoch's smaller last
// batch, or under drop_last is dropped and gives its token back.
TEST(BatchCutter, WithoutRefillAShortLastPlanIsTheSmallerLastBatchOrDroppedUnderDropLast) {
  for (const bool drop_last : {false, true}) {
    SCOPED_TRACE(drop_last ? "drop_last" : "keep the last");
    BatchCutter cutter(BatchCutter::Options{.batch_size = 3, .drop_last = drop_last});
    const BatchCutter::Cut full = feed(cutter, samples_plan(0, 0, 0, 0, {4, 5, 6}, false));
    ASSERT_EQ(full.items.size(), 1u);
    ASSERT_EQ(full.items[0]->kind, Kind::kBatch);
    EXPECT_EQ(indices_of(*full.items[0]), (std::vector<uint64_t>{4, 5, 6}));
    EXPECT_EQ(full.items[0]->next.index, 1u);
    EXPECT_EQ(full.items[0]->next.position, 3u);
    const BatchCutter::Cut rest = feed(cutter, samples_plan(1, 0, 1, 3, {7, 8}, true));
    ASSERT_EQ(rest.items.size(), 1u);
    if (drop_last) {
      EXPECT_EQ(rest.items[0]->kind, Kind::kToken);
    } else {
      ASSERT_EQ(rest.items[0]->kind, Kind::kBatch);
      EXPECT_EQ(indices_of(*rest.items[0]), (std::vector<uint64_t>{7, 8}));
      EXPECT_EQ(rest.items[0]->info.index, 1u);
      EXPECT_EQ(rest.items[0]->next.epoch, 1u);
      EXPECT_EQ(rest.items[0]->next.index, 0u);
    }
    // The next epoch starts numbering again from 0.
    const BatchCutter::Cut next = feed(cutter, samples_plan(2, 1, 0, 0, {1, 2, 3}, false));
    ASSERT_EQ(next.items.size(), 1u);
    EXPECT_EQ(next.items[0]->info.epoch, 1u);
    EXPECT_EQ(next.items[0]->info.index, 0u);
  }
}

TEST(BatchCutter, AResumedRunNumbersOnAndStopsAtMaxBatchesCountedFromTheStart) {
  // Resumed at batch 5 of epoch 1 (12 batches delivered before), max_batches 14: two batches, then the end.
  BatchCutter cutter(BatchCutter::Options{.batch_size = 2, .max_batches = 14, .first_batch = 12});
  const BatchCutter::Cut a = feed(cutter, samples_plan(0, 1, 5, 10, {3, 4}, false));
  ASSERT_EQ(a.items.size(), 1u);
  EXPECT_EQ(a.items[0]->info.index, 5u);
  EXPECT_EQ(a.items[0]->info.epoch, 1u);
  const BatchCutter::Cut b = feed(cutter, samples_plan(1, 1, 6, 12, {5, 6}, false));
  ASSERT_EQ(b.items.size(), 2u);
  EXPECT_EQ(b.items[0]->info.index, 6u);
  EXPECT_EQ(b.items[1]->kind, Kind::kEnd);
  EXPECT_TRUE(cutter.ended());
  // Plans already in flight give nothing after the end.
  EXPECT_TRUE(feed(cutter, samples_plan(2, 1, 7, 14, {7, 8}, false)).items.empty());
  EXPECT_TRUE(feed(cutter, marker_plan(3, BatchPlan::Kind::kEnd)).items.empty());
}

// Against a plain model of the rules under on_error: skip with refill: each epoch's surviving samples in
// plan order, cut into batch_size batches, the rest a last smaller batch unless drop_last; at most
// max_batches batches in all.
struct Expected {
  std::vector<std::vector<uint64_t>> batches;
  std::vector<uint64_t> epochs;
};

TEST(BatchCutter, UnderSkipRefillsBatchesAndGivesEveryPlanOneItemOverRandomRuns) {
  std::mt19937_64 random(20261126);
  for (int run = 0; run < 300; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    const size_t batch_size = 1 + random() % 6;
    const uint64_t epochs = 1 + random() % 3;
    const uint64_t epoch_size = random() % 20;
    const bool drop_last = random() % 2 == 0;
    const uint64_t max_batches = random() % 3 == 0 ? random() % 8 : 0;
    const double failure_rate = (random() % 4) * 0.2;  // 0 to 60% of the samples fail
    BatchCutter cutter(BatchCutter::Options{.batch_size = batch_size,
                                            .drop_last = drop_last,
                                            .refill = true,
                                            .on_error = OnError::kSkip,
                                            .max_batches = max_batches});
    std::bernoulli_distribution fails(failure_rate);

    Expected expected;
    std::vector<std::shared_ptr<BatchWork>> items;
    std::vector<uint64_t> skipped;
    uint64_t sequence = 0;
    size_t token_plans = 0;  // plans that hold a token: each must give exactly one batch or token
    std::vector<uint64_t> all_failed;
    for (uint64_t epoch = 0; epoch < epochs; ++epoch) {
      std::vector<uint64_t> survivors;
      // The planner plans every sample of an epoch under refill, batch_size at a time.
      for (uint64_t start = 0, index = 0; start < epoch_size; start += batch_size, ++index) {
        std::vector<uint64_t> indices;
        std::set<uint64_t> failed;
        for (uint64_t p = start; p < std::min<uint64_t>(epoch_size, start + batch_size); ++p) {
          const uint64_t sample = epoch * 1000 + p;
          indices.push_back(sample);
          if (fails(random)) {
            failed.insert(sample);
            all_failed.push_back(sample);
          } else {
            survivors.push_back(sample);
          }
        }
        const bool last = start + batch_size >= epoch_size;
        BatchCutter::Cut cut = feed(cutter, samples_plan(sequence++, epoch, index, start, indices, last), failed);
        ++token_plans;
        items.insert(items.end(), cut.items.begin(), cut.items.end());
        for (const SkippedSample& s : cut.skipped) skipped.push_back(s.index);
      }
      BatchCutter::Cut cut = feed(cutter, marker_plan(sequence++, BatchPlan::Kind::kEpochEnd, epoch));
      ++token_plans;
      items.insert(items.end(), cut.items.begin(), cut.items.end());
      for (size_t at = 0; at < survivors.size(); at += batch_size) {
        const size_t count = std::min(batch_size, survivors.size() - at);
        if (count < batch_size && drop_last) break;
        expected.batches.emplace_back(survivors.begin() + static_cast<ptrdiff_t>(at),
                                      survivors.begin() + static_cast<ptrdiff_t>(at + count));
        expected.epochs.push_back(epoch);
      }
    }
    BatchCutter::Cut end = feed(cutter, marker_plan(sequence++, BatchPlan::Kind::kEnd));
    items.insert(items.end(), end.items.begin(), end.items.end());
    const bool capped = max_batches != 0 && expected.batches.size() >= max_batches;
    if (capped) {
      expected.batches.resize(max_batches);
      expected.epochs.resize(max_batches);
    }

    // Items are numbered in order and end with exactly one end marker.
    ASSERT_FALSE(items.empty());
    for (size_t i = 0; i < items.size(); ++i) EXPECT_EQ(items[i]->sequence, i);
    EXPECT_EQ(items.back()->kind, Kind::kEnd);
    std::vector<std::vector<uint64_t>> batches;
    std::vector<uint64_t> batch_epochs;
    size_t tokens = 0;
    uint64_t batches_in_epoch = 0;
    for (size_t i = 0; i + 1 < items.size(); ++i) {
      const BatchWork& work = *items[i];
      ASSERT_NE(work.kind, Kind::kEnd) << "an end before the last item";
      ASSERT_NE(work.kind, Kind::kError);
      if (work.kind == Kind::kToken) {
        ++tokens;
        continue;
      }
      EXPECT_EQ(work.info.sequence, batches.size());
      // Batches are numbered 0, 1, 2, ... within their epoch.
      const bool same_epoch = !batch_epochs.empty() && batch_epochs.back() == work.info.epoch;
      EXPECT_EQ(work.info.index, same_epoch ? batches_in_epoch : 0u);
      batches_in_epoch = (same_epoch ? batches_in_epoch : 0u) + 1;
      batches.push_back(indices_of(work));
      batch_epochs.push_back(work.info.epoch);
    }
    EXPECT_EQ(batches, expected.batches);
    EXPECT_EQ(batch_epochs, expected.epochs);
    // Note [tokens]: until the end, every plan that holds a token gives back one batch or one token.
    if (!capped) {
      EXPECT_EQ(batches.size() + tokens, token_plans);
    }
    // Every failed sample is reported once, in order (after the end, plans in flight are dropped unread).
    if (capped) {
      ASSERT_LE(skipped.size(), all_failed.size());
      EXPECT_TRUE(std::equal(skipped.begin(), skipped.end(), all_failed.begin()));
    } else {
      EXPECT_EQ(skipped, all_failed);
    }
  }
}

}  // namespace
}  // namespace ferry::detail
