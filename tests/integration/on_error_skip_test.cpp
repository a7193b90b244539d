// on_error: skip — a sample that cannot be read or decoded is dropped from its batch, counted and
// listed; every other sample is delivered, in order, byte for byte; nothing hangs.
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "io/decoder_registry.h"
#include "io/raw_decoder.h"
#include "stages/standard_pipeline.h"
#include "tests/support/instrumented_source.h"
#include "tests/support/reference_batch.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::InstrumentedSource;

SyntheticOptions fields(uint64_t samples) {
  SyntheticOptions options;
  options.seed = 11;
  options.samples = samples;
  options.fields = {
      SyntheticField{"image", at::kByte, {3, 4, 4}, false, 0, 0, std::nullopt},
      SyntheticField{"tokens", at::kInt, {}, true, 1, 30, std::nullopt},
  };
  return options;
}

struct Outcome {
  std::vector<uint64_t> delivered;  // sample indices, in delivery order
  uint64_t batches = 0;
  PipelineStats stats;
};

Outcome run_to_end(const std::shared_ptr<const SyntheticSource>& truth, std::set<uint64_t> failing, PipelineOptions options) {
  auto source = std::make_shared<const InstrumentedSource>(truth, std::move(failing), 100us);
  options.device = "cpu";
  options.on_error = OnError::kSkip;
  Pipeline pipeline = make_pipeline(source, options);
  Outcome run;
  while (auto batch = pipeline.next()) {
    EXPECT_GT(batch->batch_size(), 0u) << "an empty batch was delivered";
    EXPECT_EQ(testing::compare_with_reference(*batch, *truth), "");
    run.delivered.insert(run.delivered.end(), batch->sample_indices().begin(), batch->sample_indices().end());
    ++run.batches;
  }
  run.stats = pipeline.stats();
  return run;
}

std::vector<uint64_t> expected_order(uint64_t samples, const std::set<uint64_t>& failing, uint64_t epochs) {
  std::vector<uint64_t> order;
  for (uint64_t epoch = 0; epoch < epochs; ++epoch) {
    for (uint64_t index = 0; index < samples; ++index) {
      if (failing.count(index) == 0) order.push_back(index);
    }
  }
  return order;
}

TEST(OnErrorSkip, DeliversEveryOtherSampleInOrderByteForByte) {
  constexpr uint64_t kSamples = 203;
  auto truth = std::make_shared<const SyntheticSource>(fields(kSamples));
  std::mt19937_64 random(2024);
  for (size_t threads : {1, 2, 4}) {
    for (int round = 0; round < 3; ++round) {
      std::set<uint64_t> failing{0, kSamples - 1};  // the very first and last samples too
      const size_t extra = std::uniform_int_distribution<size_t>(0, 30)(random);
      for (size_t i = 0; i < extra; ++i) failing.insert(std::uniform_int_distribution<uint64_t>(0, kSamples - 1)(random));
      SCOPED_TRACE("threads " + std::to_string(threads) + ", " + std::to_string(failing.size()) + " failing");
      PipelineOptions options;
      options.batch_size = 8;
      options.epochs = 2;
      options.decode_threads = threads;
      const Outcome run = run_to_end(truth, failing, options);
      EXPECT_EQ(run.delivered, expected_order(kSamples, failing, 2));
      EXPECT_EQ(run.stats.skipped_samples, failing.size() * 2);
      ASSERT_EQ(run.stats.skipped.size(), failing.size() * 2);
      // Listed in delivery order: the failing samples of epoch 0, then of epoch 1.
      std::vector<uint64_t> listed;
      for (const SkippedSample& skipped : run.stats.skipped) {
        listed.push_back(skipped.index);
        EXPECT_EQ(skipped.key, "");  // the read failed before the source named the sample
        EXPECT_EQ(skipped.stage, "decode");
        EXPECT_NE(skipped.reason.find("planted failure reading sample " + std::to_string(skipped.index)), std::string::npos)
            << skipped.reason;
      }
      std::vector<uint64_t> expected_listed(failing.begin(), failing.end());
      expected_listed.insert(expected_listed.end(), failing.begin(), failing.end());
      EXPECT_EQ(listed, expected_listed);
    }
  }
}

// A batch whose samples all fail delivers nothing, and its token still comes back: with prefetch 1
// a lost token would stop the run for good (the test's timeout would catch the hang).
TEST(OnErrorSkip, AWhollyFailedBatchIsLeftOutAndTheRunGoesOn) {
  auto truth = std::make_shared<const SyntheticSource>(fields(40));
  std::set<uint64_t> failing;
  for (uint64_t index = 8; index < 24; ++index) failing.insert(index);  // batches 1 and 2 of 5
  for (size_t prefetch : {1, 2}) {
    PipelineOptions options;
    options.batch_size = 8;
    options.prefetch = prefetch;
    options.decode_threads = 2;
    const Outcome run = run_to_end(truth, failing, options);
    EXPECT_EQ(run.batches, 3u);
    EXPECT_EQ(run.delivered, expected_order(40, failing, 1));
    EXPECT_EQ(run.stats.batches, 3u);
    EXPECT_EQ(run.stats.samples, 24u);
  }
}

TEST(OnErrorSkip, ListsTheFirstHundredAndCountsEveryOne) {
  auto truth = std::make_shared<const SyntheticSource>(fields(300));
  std::set<uint64_t> failing;
  for (uint64_t index = 0; index < 300; index += 2) failing.insert(index);
  PipelineOptions options;
  options.batch_size = 10;
  options.decode_threads = 2;
  const Outcome run = run_to_end(truth, failing, options);
  EXPECT_EQ(run.stats.skipped_samples, 150u);
  ASSERT_EQ(run.stats.skipped.size(), PipelineStats::kMaxListedSkips);
  EXPECT_EQ(run.stats.skipped.back().index, 2 * (PipelineStats::kMaxListedSkips - 1));
  EXPECT_EQ(run.delivered.size(), 150u);
}

// A decoder's complaint about a sample it read is skipped like a read failure, and the skip names
// the sample's key.
class PickyDecoder : public Decoder {
 public:
  std::string_view name() const override { return "picky-test"; }
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override {
    if (encoded.numel() > 0 && encoded.data_ptr<uint8_t>()[0] % 5 == 0) throw Error("the first byte is a multiple of 5");
    return raw_.decode(encoded, spec);
  }

 private:
  RawDecoder raw_;
};

TEST(OnErrorSkip, SkipsDecoderFailuresNamingTheSampleKey) {
  static const bool registered = [] {
    DecoderRegistry::global().add(std::make_shared<PickyDecoder>());
    return true;
  }();
  (void)registered;
  auto truth = std::make_shared<const SyntheticSource>(fields(120));
  auto source = std::make_shared<const InstrumentedSource>(truth);
  PipelineOptions options;
  options.device = "cpu";
  options.batch_size = 16;
  options.on_error = OnError::kSkip;
  options.decoders = {{"image", "picky-test"}};
  std::set<uint64_t> failing;
  for (uint64_t index = 0; index < 120; ++index) {
    if (truth->read(index).fields[0].data_ptr<uint8_t>()[0] % 5 == 0) failing.insert(index);
  }
  ASSERT_FALSE(failing.empty());
  Pipeline pipeline = make_pipeline(source, options);
  std::vector<uint64_t> delivered;
  while (auto batch = pipeline.next()) {
    EXPECT_EQ(testing::compare_with_reference(*batch, *truth), "");
    delivered.insert(delivered.end(), batch->sample_indices().begin(), batch->sample_indices().end());
  }
  EXPECT_EQ(delivered, expected_order(120, failing, 1));
  const PipelineStats stats = pipeline.stats();
  ASSERT_EQ(stats.skipped.size(), failing.size());
  for (const SkippedSample& skipped : stats.skipped) {
    EXPECT_EQ(skipped.key, "sample-" + std::to_string(skipped.index));
    EXPECT_NE(skipped.reason.find("field 'image' (decoder 'picky-test'): the first byte is a multiple of 5"), std::string::npos)
        << skipped.reason;
  }
}

}  // namespace
}  // namespace ferry
