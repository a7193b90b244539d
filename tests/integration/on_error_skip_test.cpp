// on_error: skip — a sample that cannot be read or decoded is dropped, counted and listed; its batch
// is filled from the next samples (batches keep their size; only an epoch's last is smaller); every
// other sample is delivered, in order, byte for byte; resuming gives the same batches; nothing hangs.
#include <optional>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/io/decoders/raw_decoder.h>
#include <ferry/io/samplers/sequential_sampler.h>
#include <ferry/io/samplers/sharded_sampler.h>
#include <ferry/io/samplers/shuffled_sampler.h>
#include <ferry/stages/standard_pipeline.h>
#include "tests/support/instrumented_source.h"
#include "tests/support/pipeline_checks.h"
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

using Batches = std::vector<std::vector<uint64_t>>;  // sample indices per batch, in delivery order

struct Outcome {
  std::vector<uint64_t> delivered;  // sample indices, in delivery order
  Batches batches;
  PipelineStats stats;
  PipelineState state;  // after the last batch taken
};

// Takes up to `limit` batches (0: all), checking each one's bytes and its epoch/index numbering.
Outcome run_batches(const std::shared_ptr<const SyntheticSource>& truth, std::set<uint64_t> failing,
                    PipelineOptions options, uint64_t limit = 0, std::shared_ptr<const Sampler> sampler = nullptr) {
  auto source = std::make_shared<const InstrumentedSource>(truth, std::move(failing), 100us);
  options.device = "cpu";
  options.on_error = OnError::kSkip;
  Pipeline pipeline = make_pipeline(source, options, std::move(sampler));
  Outcome run;
  std::optional<std::pair<uint64_t, uint64_t>> previous;  // epoch, index
  while (limit == 0 || run.batches.size() < limit) {
    auto batch = pipeline.next();
    if (!batch) break;
    EXPECT_GT(batch->batch_size(), 0u) << "an empty batch was delivered";
    EXPECT_EQ(testing::compare_with_reference(*batch, *truth), "");
    if (previous) {
      const bool next_in_epoch = batch->epoch() == previous->first && batch->index() == previous->second + 1;
      const bool next_epoch = batch->epoch() == previous->first + 1 && batch->index() == 0;
      EXPECT_TRUE(next_in_epoch || next_epoch) << "batch " << batch->epoch() << "/" << batch->index() << " after "
                                               << previous->first << "/" << previous->second;
    }
    previous = {batch->epoch(), batch->index()};
    run.delivered.insert(run.delivered.end(), batch->sample_indices().begin(), batch->sample_indices().end());
    run.batches.push_back(batch->sample_indices());
  }
  run.stats = pipeline.stats();
  run.state = pipeline.state();
  return run;
}

Outcome run_to_end(const std::shared_ptr<const SyntheticSource>& truth, std::set<uint64_t> failing,
                   PipelineOptions options) {
  return run_batches(truth, std::move(failing), std::move(options));
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

// The batches a sequential run delivers: each epoch's surviving samples cut into batch_size pieces,
// the last one smaller (or dropped under drop_last).
Batches expected_batches(uint64_t samples, const std::set<uint64_t>& failing, uint64_t epochs, size_t batch_size,
                         bool drop_last) {
  Batches batches;
  for (uint64_t epoch = 0; epoch < epochs; ++epoch) {
    const std::vector<uint64_t> kept = expected_order(samples, failing, 1);
    for (size_t first = 0; first < kept.size(); first += batch_size) {
      const size_t count = std::min(batch_size, kept.size() - first);
      if (count < batch_size && drop_last) break;
      batches.emplace_back(kept.begin() + static_cast<ptrdiff_t>(first),
                           kept.begin() + static_cast<ptrdiff_t>(first + count));
    }
  }
  return batches;
}

TEST(OnErrorSkip, DeliversEveryOtherSampleInOrderByteForByte) {
  constexpr uint64_t kSamples = 203;
  auto truth = std::make_shared<const SyntheticSource>(fields(kSamples));
  std::mt19937_64 random(2024);
  for (size_t threads : {1, 2, 4}) {
    for (int round = 0; round < 3; ++round) {
      std::set<uint64_t> failing{0, kSamples - 1};  // the very first and last samples too
      const size_t extra = std::uniform_int_distribution<size_t>(0, 30)(random);
      for (size_t i = 0; i < extra; ++i)
        failing.insert(std::uniform_int_distribution<uint64_t>(0, kSamples - 1)(random));
      SCOPED_TRACE("threads " + std::to_string(threads) + ", " + std::to_string(failing.size()) + " failing");
      PipelineOptions options;
      options.batch_size = 8;
      options.epochs = 2;
      options.decode_threads = threads;
      const Outcome run = run_to_end(truth, failing, options);
      EXPECT_EQ(run.delivered, expected_order(kSamples, failing, 2));
      EXPECT_EQ(run.batches, expected_batches(kSamples, failing, 2, 8, false));
      EXPECT_EQ(run.stats.skipped_samples, failing.size() * 2);
      EXPECT_EQ(run.stats.placed_bytes, 0u) << "re-cut batches are packed (Note [placing samples])";
      ASSERT_EQ(run.stats.skipped.size(), failing.size() * 2);
      // Listed in delivery order: the failing samples of epoch 0, then of epoch 1.
      std::vector<uint64_t> listed;
      for (const SkippedSample& skipped : run.stats.skipped) {
        listed.push_back(skipped.index);
        EXPECT_EQ(skipped.key, "");  // the read failed before the source named the sample
        EXPECT_EQ(skipped.stage, "decode");
        EXPECT_NE(skipped.reason.find("planted failure reading sample " + std::to_string(skipped.index)),
                  std::string::npos)
            << skipped.reason;
      }
      std::vector<uint64_t> expected_listed(failing.begin(), failing.end());
      expected_listed.insert(expected_listed.end(), failing.begin(), failing.end());
      EXPECT_EQ(listed, expected_listed);
    }
  }
}

// Plans whose samples all fail complete no batch, and their tokens still come back: with prefetch 1
// a lost token would stop the run for good (the test's timeout would catch the hang).
TEST(OnErrorSkip, WhollyFailedPlansGiveTheirTokensBack) {
  auto truth = std::make_shared<const SyntheticSource>(fields(40));
  std::set<uint64_t> failing;
  for (uint64_t index = 8; index < 24; ++index) failing.insert(index);  // plans 1 and 2 of 5
  for (size_t prefetch : {1, 2}) {
    for (bool drop_last : {false, true}) {
      PipelineOptions options;
      options.batch_size = 8;
      options.prefetch = prefetch;
      options.decode_threads = 2;
      options.drop_last = drop_last;
      options.epochs = 2;
      const Outcome run = run_to_end(truth, failing, options);
      EXPECT_EQ(run.batches, expected_batches(40, failing, 2, 8, drop_last));
      EXPECT_EQ(run.stats.batches, 6u);
      EXPECT_EQ(run.stats.samples, 48u);
    }
  }
}

// Batches keep their size: each is filled from the samples after it, whatever the batch size,
// prefetch, thread count and drop_last; an epoch's rest is its one smaller batch (or dropped).
TEST(OnErrorSkip, BatchesAreFilledFromTheNextSamples) {
  constexpr uint64_t kSamples = 97;
  auto truth = std::make_shared<const SyntheticSource>(fields(kSamples));
  std::mt19937_64 random(7);
  for (size_t batch_size : {1, 3, 8, 32, 100}) {
    for (size_t prefetch : {1, 3}) {
      const bool drop_last = random() % 2 == 0;
      std::set<uint64_t> failing;
      const size_t count = std::uniform_int_distribution<size_t>(1, 40)(random);
      for (size_t i = 0; i < count; ++i)
        failing.insert(std::uniform_int_distribution<uint64_t>(0, kSamples - 1)(random));
      SCOPED_TRACE("batch " + std::to_string(batch_size) + ", prefetch " + std::to_string(prefetch) + ", drop_last " +
                   std::to_string(drop_last) + ", " + std::to_string(failing.size()) + " failing");
      PipelineOptions options;
      options.batch_size = batch_size;
      options.prefetch = prefetch;
      options.drop_last = drop_last;
      options.epochs = 2;
      options.decode_threads = 1 + random() % 4;
      const Outcome run = run_to_end(truth, failing, options);
      EXPECT_EQ(run.batches, expected_batches(kSamples, failing, 2, batch_size, drop_last));
      EXPECT_EQ(run.stats.skipped_samples, failing.size() * 2);
    }
  }
}

// max_batches counts delivered batches, not plans: with skips the run still ends after exactly that
// many full batches.
TEST(OnErrorSkip, MaxBatchesCountsDeliveredBatches) {
  auto truth = std::make_shared<const SyntheticSource>(fields(100));
  std::set<uint64_t> failing;
  for (uint64_t index = 0; index < 100; index += 3) failing.insert(index);
  for (size_t prefetch : {1, 4}) {
    PipelineOptions options;
    options.batch_size = 10;
    options.prefetch = prefetch;
    options.epochs = 3;
    options.max_batches = 9;
    const Outcome run = run_to_end(truth, failing, options);
    Batches want = expected_batches(100, failing, 3, 10, false);
    want.resize(9);
    EXPECT_EQ(run.batches, want);
    // Resumed after batch 4, it delivers the rest up to 9; resumed at 9 (or past), nothing.
    const Outcome first = run_batches(truth, failing, options, 4);
    PipelineOptions resumed = options;
    resumed.first_batch = first.state.next_batch;
    resumed.start = first.state.next;
    Batches joined = first.batches;
    const Outcome rest = run_to_end(truth, failing, resumed);
    joined.insert(joined.end(), rest.batches.begin(), rest.batches.end());
    EXPECT_EQ(joined, want);
    resumed.first_batch = run.state.next_batch;
    resumed.start = run.state.next;
    EXPECT_TRUE(run_to_end(truth, failing, resumed).batches.empty()) << "a run resumed at max_batches delivered more";
  }
}

// drop_last with epochs smaller than a batch: no epoch can deliver one, so the run ends at once
// (under skip the planner plans whole epochs, which must not mean walking through a million of them).
TEST(OnErrorSkip, EndsAtOnceWhenNoEpochCanMakeABatch) {
  auto truth = std::make_shared<const SyntheticSource>(fields(3));
  PipelineOptions options;
  options.batch_size = 4;
  options.drop_last = true;
  options.epochs = uint64_t{1} << 40;
  EXPECT_TRUE(run_to_end(truth, {1}, options).batches.empty());
}

// A dataset whose every sample fails (or, under drop_last, that keeps fewer than batch_size), under
// "run until max_batches" epochs (2^40): the run used to skip forever, never delivering a batch, an
// error or its end (found while writing the soak's model of epochs that make no batch). Now the
// first whole epoch without a batch ends it with an error naming its first lost sample; a single
// epoch still ends quietly with every skip counted, and a resumed run's part-epoch is not held
// against it (the next whole one is).
TEST(OnErrorSkip, AWholeEpochLostEndsTheRunInsteadOfSkippingForever) {
  auto truth = std::make_shared<const SyntheticSource>(fields(5));
  const std::set<uint64_t> all{0, 1, 2, 3, 4};
  auto source = std::make_shared<const InstrumentedSource>(truth, all, 0us);
  PipelineOptions options;
  options.device = "cpu";
  options.on_error = OnError::kSkip;
  options.batch_size = 2;
  options.epochs = uint64_t{1} << 40;
  options.max_batches = 1;
  {
    Pipeline pipeline = make_pipeline(source, options);
    const testing::RunToError run = testing::run_to_error(pipeline, *truth);
    ASSERT_TRUE(run.error) << "the run ended without an error";
    EXPECT_EQ(run.batches, 0u);
    EXPECT_EQ(run.error->sample_index(), 0u);
    EXPECT_EQ(run.error->epoch(), 0u);
    EXPECT_NE(std::string(run.error->what()).find("made no batch of epoch 0: it lost 5 of its 5 samples"),
              std::string::npos)
        << run.error->what();
    EXPECT_NE(std::string(run.error->what()).find("planted failure reading sample 0"), std::string::npos)
        << run.error->what();
    EXPECT_EQ(pipeline.stats().skipped_samples, 5u);
  }
  {
    PipelineOptions resumed = options;
    resumed.start = BatchCursor{0, 1, 3};  // part-way into epoch 0: epoch 1 is the first whole one
    resumed.first_batch = 0;
    Pipeline pipeline = make_pipeline(source, resumed);
    const testing::RunToError run = testing::run_to_error(pipeline, *truth);
    ASSERT_TRUE(run.error) << "the run ended without an error";
    EXPECT_EQ(run.error->epoch(), 1u);
    EXPECT_EQ(pipeline.stats().skipped_samples, 2u + 5u);
  }
  {
    // Under drop_last, keeping fewer than batch_size is the same: no epoch can make a batch.
    PipelineOptions drop = options;
    drop.drop_last = true;
    drop.batch_size = 4;
    auto some = std::make_shared<const InstrumentedSource>(truth, std::set<uint64_t>{1, 3}, 0us);
    Pipeline pipeline = make_pipeline(some, drop);
    const testing::RunToError run = testing::run_to_error(pipeline, *truth);
    ASSERT_TRUE(run.error) << "the run ended without an error";
    EXPECT_EQ(run.error->sample_index(), 1u);
    EXPECT_NE(std::string(run.error->what()).find("drop_last drops the 3 left (fewer than batch_size 4)"),
              std::string::npos)
        << run.error->what();
  }
  PipelineOptions one_epoch = options;
  one_epoch.epochs = 1;
  const Outcome run = run_to_end(truth, all, one_epoch);
  EXPECT_TRUE(run.batches.empty());
  EXPECT_EQ(run.stats.skipped_samples, 5u);
}

// A rank's share of a shuffle changes every epoch: an epoch whose share all fails says nothing about
// the next, which goes on and delivers.
TEST(OnErrorSkip, AnEpochLostGoesOnWhenTheNextDealsOtherSamples) {
  constexpr uint64_t kSamples = 8;
  auto truth = std::make_shared<const SyntheticSource>(fields(kSamples));
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const auto sampler = std::make_shared<const ShardedSampler>(std::make_shared<const ShuffledSampler>(kSamples, seed),
                                                                0, 4, ShardedSampler::Remainder::kPad);
    ASSERT_FALSE(sampler->same_samples_every_epoch());
    std::set<uint64_t> failing;
    for (uint64_t p = 0; p < sampler->epoch_size(); ++p) failing.insert(sampler->index(0, p));
    std::vector<uint64_t> next_epoch;
    for (uint64_t p = 0; p < sampler->epoch_size(); ++p) {
      if (failing.count(sampler->index(1, p)) == 0) next_epoch.push_back(sampler->index(1, p));
    }
    if (next_epoch.empty()) continue;  // this seed deals epoch 1 the same samples: try another
    PipelineOptions options;
    options.batch_size = 2;
    options.epochs = 2;  // skip_replaces stays off: batches are cut from what decodes (refill)
    const Outcome run = run_batches(truth, failing, options, 0, sampler);
    ASSERT_EQ(run.batches.size(), 1u);
    EXPECT_EQ(run.batches[0], next_epoch);
    return;
  }
  FAIL() << "no seed dealt rank 0 other samples in epoch 1";
}

// A state taken after any batch resumes at the next one: the batches of the stopped run and of the
// resumed one together are exactly an uninterrupted run's, shuffled or not, under drop_last or not.
TEST(OnErrorSkip, ResumesWhereItStoppedWithSkippedSamples) {
  constexpr uint64_t kSamples = 61;
  auto truth = std::make_shared<const SyntheticSource>(fields(kSamples));
  std::set<uint64_t> failing{0, 5, 6, 7, 19, 33, 34, 60};
  for (bool shuffle : {false, true}) {
    for (bool drop_last : {false, true}) {
      const auto sampler = shuffle ? std::make_shared<const ShuffledSampler>(kSamples, 99) : nullptr;
      PipelineOptions options;
      options.batch_size = 7;
      options.epochs = 3;
      options.drop_last = drop_last;
      options.decode_threads = 3;
      const Outcome whole = run_batches(truth, failing, options, 0, sampler);
      if (!shuffle) {
        ASSERT_EQ(whole.batches, expected_batches(kSamples, failing, 3, 7, drop_last));
      }
      for (uint64_t stop = 1; stop <= whole.batches.size(); ++stop) {
        SCOPED_TRACE("shuffle " + std::to_string(shuffle) + ", drop_last " + std::to_string(drop_last) +
                     ", stopped after " + std::to_string(stop));
        const Outcome first = run_batches(truth, failing, options, stop, sampler);
        ASSERT_EQ(first.state.next_batch, stop);
        PipelineOptions resumed = options;
        resumed.first_batch = first.state.next_batch;
        resumed.start = first.state.next;
        resumed.prefetch = 1 + stop % 3;  // resuming does not depend on prefetch or threads
        resumed.decode_threads = 1 + stop % 2;
        const Outcome rest = run_batches(truth, failing, resumed, 0, sampler);
        Batches joined = first.batches;
        joined.insert(joined.end(), rest.batches.begin(), rest.batches.end());
        EXPECT_EQ(joined, whole.batches);
      }
    }
  }
}

// Several ranks (skip_replaces): a skipped sample is replaced by the next sample of the epoch's order
// that reads, wrapping to its start, so batches keep their plans and every rank delivers exactly
// as many batches, of the same sizes, as without failures; runs of failures and the last sample too.
TEST(OnErrorSkip, ReplacesSkippedSamplesSoEveryRankKeepsItsBatches) {
  constexpr uint64_t kSamples = 53;
  auto truth = std::make_shared<const SyntheticSource>(fields(kSamples));
  const std::set<uint64_t> failing{3, 10, 11, 12, 13, 27, 40, 52};
  for (const uint64_t world : {1, 2, 3, 5, 8}) {
    for (uint64_t rank = 0; rank < world; ++rank) {
      for (const bool shuffle : {false, true}) {
        SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(world) + (shuffle ? ", shuffled" : ""));
        std::shared_ptr<const Sampler> order = std::make_shared<const SequentialSampler>(kSamples);
        if (shuffle) order = std::make_shared<const ShuffledSampler>(kSamples, 5);
        const auto sampler =
            std::make_shared<const ShardedSampler>(order, rank, world, ShardedSampler::Remainder::kPad);
        PipelineOptions options;
        options.batch_size = 4;
        options.epochs = 2;
        options.prefetch = 1 + rank % 3;
        options.decode_threads = 1 + rank % 4;
        options.skip_replaces = true;
        const Outcome run = run_batches(truth, failing, options, 0, sampler);
        // Expected: every planned position, its sample or the first readable one after it.
        Batches want;
        uint64_t attempts = 0;
        for (uint64_t epoch = 0; epoch < 2; ++epoch) {
          const uint64_t size = sampler->epoch_size();
          for (uint64_t first = 0; first < size; first += 4) {
            std::vector<uint64_t> batch;
            for (uint64_t p = first; p < std::min(size, first + 4); ++p) {
              uint64_t k = 0;
              while (failing.count(sampler->index(epoch, (p + k) % size)) != 0) ++k;
              attempts += k;
              batch.push_back(sampler->index(epoch, (p + k) % size));
            }
            want.push_back(batch);
          }
        }
        EXPECT_EQ(run.batches, want);
        EXPECT_EQ(run.stats.skipped_samples, attempts);
        // Every sample's image, a replacement's too, was placed as it was decoded; the variable-length
        // tokens were packed (Note [placing samples]).
        EXPECT_EQ(run.stats.placed_bytes, run.stats.samples * 3 * 4 * 4);
      }
    }
  }
}

// A replacement search that meets only failures gives up after 100 and fails the run, naming the
// first sample: a shorter epoch on one rank would hang the others.
TEST(OnErrorSkip, ReplacingGivesUpOnARunOfBrokenSamples) {
  auto truth = std::make_shared<const SyntheticSource>(fields(300));
  std::set<uint64_t> failing;
  for (uint64_t index = 100; index < 250; ++index) failing.insert(index);
  auto source = std::make_shared<const InstrumentedSource>(truth, failing, 0us);
  PipelineOptions options;
  options.device = "cpu";
  options.on_error = OnError::kSkip;
  options.skip_replaces = true;
  options.batch_size = 10;
  Pipeline pipeline = make_pipeline(source, options);
  const testing::RunToError run = testing::run_to_error(pipeline, *truth);
  ASSERT_TRUE(run.error) << "the run ended without an error";
  EXPECT_NE(std::string(run.error->what())
                .find("found no readable sample to take the place of sample 100 among the 100 after it"),
            std::string::npos)
      << run.error->what();
  EXPECT_EQ(run.batches, 10u);  // every batch before the broken run
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
    if (encoded.numel() > 0 && encoded.data_ptr<uint8_t>()[0] % 5 == 0)
      throw Error("the first byte is a multiple of 5");
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
    EXPECT_NE(skipped.reason.find("field 'image' (decoder 'picky-test'): the first byte is a multiple of 5"),
              std::string::npos)
        << skipped.reason;
  }
}

}  // namespace
}  // namespace ferry
