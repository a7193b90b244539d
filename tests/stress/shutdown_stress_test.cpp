#include <chrono>
#include <future>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include <ferry/stages/standard_pipeline.h>
#include <ferry/stages/standard_stages.h>
#include "tests/support/instrumented_source.h"
#include "tests/support/random_options.h"
#include "tests/support/reference_batch.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Destroys pipelines at random moments — before the first batch, mid-epoch, with every prefetched
// batch unclaimed, with slow decoders — 1000 times. Each destruction must return within a second,
// and afterwards no lease may be left: every slab is back in its pool (a lease holds a reference
// to the pool, so the test's reference must be the last one).
TEST(Shutdown, AtRandomMomentsReturnsWithinASecondAndReturnsEverySlab) {
  std::mt19937_64 rng(31337);
  for (int repetition = 0; repetition < 1000; ++repetition) {
    SCOPED_TRACE("repetition " + std::to_string(repetition));
    auto truth = std::make_shared<const SyntheticSource>(testing::random_synthetic_options(rng, 400));
    const auto delay = std::chrono::microseconds(rng() % 3 == 0 ? rng() % 3000 : 0);
    auto source = std::make_shared<const testing::InstrumentedSource>(truth, std::nullopt, delay);
    PipelineOptions options;
    options.batch_size = 1 + rng() % 16;
    options.decode_threads = 1 + rng() % 8;
    options.prefetch = 1 + rng() % 4;
    options.epochs = 3;
    StageSet stages = make_standard_stages(source, options);
    std::shared_ptr<PinnedPool> pool = stages.pool;
    auto pipeline = std::make_unique<Pipeline>(pipeline_from_stages(std::move(stages), options));

    // Half the time a consumer thread is inside next() when this one closes (the way a training
    // loop's thread meets a shutdown from another); otherwise this thread takes a few batches first.
    std::future<void> consumer;
    if (rng() % 2 == 0) {
      consumer = std::async(std::launch::async, [&pipeline, &truth] {
        while (auto batch = pipeline->next()) EXPECT_EQ(testing::compare_with_reference(*batch, *truth), "");
      });
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    } else {
      const uint64_t take = rng() % 12;
      for (uint64_t i = 0; i < take; ++i) {
        const auto batch = pipeline->next();
        if (!batch) break;
        ASSERT_EQ(testing::compare_with_reference(*batch, *truth), "");
      }
      if (rng() % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));  // let it fill up
    }

    const auto start = Clock::now();
    if (consumer.valid()) {
      pipeline->close();  // wakes the consumer, which then sees the end
      consumer.get();
    }
    pipeline.reset();
    const auto took = Clock::now() - start;
    EXPECT_LT(took, 1s) << "destruction took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                        << " ms";
    EXPECT_EQ(pool.use_count(), 1) << "a lease outlived its pipeline";
    EXPECT_EQ(pool->stats().leased_bytes, 0u);
  }
}

TEST(Shutdown, WhileAConsumerIsBlockedInNext) {
  auto truth = std::make_shared<const SyntheticSource>(
      SyntheticOptions{1, 64, {SyntheticField{"x", at::kFloat, {16}, false, 0, 0, std::nullopt}}});
  auto slow = std::make_shared<const testing::InstrumentedSource>(truth, std::nullopt, 500ms);
  PipelineOptions options;
  options.batch_size = 8;
  options.decode_threads = 2;
  auto pipeline = std::make_unique<Pipeline>(make_pipeline(slow, options));
  auto consumer = std::async(std::launch::async, [&] { return pipeline->next(); });
  std::this_thread::sleep_for(20ms);
  const auto start = Clock::now();
  pipeline->close();
  EXPECT_FALSE(consumer.get());
  pipeline.reset();
  EXPECT_LT(Clock::now() - start, 1s);
}

}  // namespace
}  // namespace ferry
