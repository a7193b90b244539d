#include <ferry/io/samplers/shuffled_sampler.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <ferry/pipeline/error.h>
#include "tests/support/sampler_orders.h"

namespace ferry {
namespace {

constexpr uint64_t kTestSeed = 20240611;

using testing::epoch_order;
using testing::is_permutation_of_range;

// Small and boundary sizes (around powers of two, where the Feistel domain changes), then random ones.
std::vector<uint64_t> sizes_to_test(std::mt19937_64& rng) {
  std::vector<uint64_t> sizes = {0,   1,   2,    3,    4,    5,    7,    8,    9,    10,    15,    16,
                                 17,  31,  32,   33,   63,   64,   65,   100,  127,  128,   129,   255,
                                 256, 257, 1000, 1023, 1024, 1025, 4095, 4096, 4097, 65535, 65536, 65537};
  std::uniform_int_distribution<uint64_t> any(0, 100000);
  for (int i = 0; i < 50; ++i) sizes.push_back(any(rng));
  return sizes;
}

TEST(ShuffledSampler, EveryEpochIsAPermutationOfTheSourceAndEpochsDiffer) {
  std::mt19937_64 rng(kTestSeed);
  for (const uint64_t n : sizes_to_test(rng)) {
    const uint64_t seed = rng();
    SCOPED_TRACE("test seed " + std::to_string(kTestSeed) + ", n=" + std::to_string(n) +
                 ", sampler seed=" + std::to_string(seed));
    const ShuffledSampler sampler(n, seed);
    ASSERT_EQ(sampler.epoch_size(), n);
    std::vector<std::vector<uint64_t>> epochs;
    for (uint64_t epoch : {0, 1, 2, 1000}) {
      epochs.push_back(epoch_order(sampler, epoch));
      ASSERT_TRUE(is_permutation_of_range(epochs.back())) << "epoch " << epoch;
    }
    if (n >= 10) {
      for (size_t a = 0; a < epochs.size(); ++a) {
        for (size_t b = a + 1; b < epochs.size(); ++b) EXPECT_NE(epochs[a], epochs[b]) << "epochs #" << a << ", #" << b;
      }
    }
  }
}

TEST(ShuffledSampler, ShufflesRatherThanShiftsALargeEpoch) {
  // A permutation close to the identity would pass the tests above; this one must move most samples.
  const uint64_t n = 10000;
  const ShuffledSampler sampler(n, 7);
  const auto order = epoch_order(sampler, 0);
  uint64_t fixed = 0;
  uint64_t ascending = 0;
  for (uint64_t p = 0; p < n; ++p) {
    fixed += order[p] == p;
    if (p > 0) ascending += order[p] > order[p - 1];
  }
  EXPECT_LT(fixed, 20u);  // a random permutation has about 1
  EXPECT_GT(ascending, n * 4 / 10);
  EXPECT_LT(ascending, n * 6 / 10);
}

TEST(ShuffledSampler, SameSeedAndEpochGiveTheSameOrderFromAnotherSampler) {
  std::mt19937_64 rng(kTestSeed + 1);
  std::uniform_int_distribution<uint64_t> any(0, 20000);
  for (int i = 0; i < 20; ++i) {
    const uint64_t n = any(rng);
    const uint64_t seed = rng();
    const uint64_t epoch = rng() % 100;
    SCOPED_TRACE("n=" + std::to_string(n) + ", seed=" + std::to_string(seed) + ", epoch=" + std::to_string(epoch));
    const ShuffledSampler a(n, seed);
    const ShuffledSampler b(n, seed);
    EXPECT_EQ(epoch_order(a, epoch), epoch_order(b, epoch));
  }
}

TEST(ShuffledSampler, DifferentSeedsGiveDifferentOrders) {
  std::mt19937_64 rng(kTestSeed + 2);
  std::uniform_int_distribution<uint64_t> any(10, 20000);
  for (int i = 0; i < 20; ++i) {
    const uint64_t n = any(rng);
    const uint64_t seed = rng();
    SCOPED_TRACE("n=" + std::to_string(n) + ", seed=" + std::to_string(seed));
    const ShuffledSampler a(n, seed);
    const ShuffledSampler b(n, seed + 1);
    EXPECT_NE(epoch_order(a, 0), epoch_order(b, 0));
  }
}

TEST(ShuffledSampler, PinsTheOrderSoEveryMachineAgrees) {
  // The order is part of the on-disk contract (a resumed run must continue the same epoch), so a
  // change to the mixing must be deliberate: it changes these values.
  // Only fixed-width integer arithmetic goes into the order, so these hold on every compiler and host.
  EXPECT_EQ(epoch_order(ShuffledSampler(10, 42), 3), (std::vector<uint64_t>{0, 2, 4, 7, 8, 6, 5, 9, 1, 3}));
  const ShuffledSampler big(uint64_t{1} << 40, 1);
  EXPECT_EQ(big.index(0, 0), 1031420706822u);
  EXPECT_EQ(big.index(0, 1), 857118918416u);
  EXPECT_EQ(big.index(0, 2), 301740032859u);
  EXPECT_EQ(big.index(0, 3), 246686367411u);
}

TEST(ShuffledSampler, IndexIsTheSameInAnyOrderAndFromSeveralThreads) {
  const uint64_t n = 50000;
  const uint64_t seed = 99;
  const ShuffledSampler sampler(n, seed);
  std::vector<std::vector<uint64_t>> expected;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) expected.push_back(epoch_order(sampler, epoch));

  // Reverse and random order, one thread.
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    for (uint64_t p = n; p-- > 0;) ASSERT_EQ(sampler.index(epoch, p), expected[epoch][p]);
  }
  std::mt19937_64 rng(kTestSeed + 3);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t epoch = rng() % 3;
    const uint64_t p = rng() % n;
    ASSERT_EQ(sampler.index(epoch, p), expected[epoch][p]) << "epoch " << epoch << " position " << p;
  }

  for (const unsigned threads : {2u, 4u, 8u}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    std::vector<uint64_t> mismatches(threads, 0);
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937_64 local(kTestSeed + 100 + t);
        for (int i = 0; i < 50000; ++i) {
          const uint64_t epoch = local() % 3;
          const uint64_t p = local() % n;
          mismatches[t] += sampler.index(epoch, p) != expected[epoch][p];
        }
      });
    }
    for (auto& worker : workers) worker.join();
    for (unsigned t = 0; t < threads; ++t) EXPECT_EQ(mismatches[t], 0u) << "thread " << t;
  }
}

TEST(ShuffledSampler, HugeSizesGiveInRangeDistinctIndices) {
  for (const uint64_t n : {uint64_t{1} << 40, (uint64_t{1} << 40) + 12345, (uint64_t{1} << 63) + 1, ~uint64_t{0}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const ShuffledSampler sampler(n, 5);
    std::unordered_set<uint64_t> seen;
    for (uint64_t p = 0; p < 3000; ++p) {
      const uint64_t i = sampler.index(1, p);
      ASSERT_LT(i, n) << "position " << p;
      ASSERT_TRUE(seen.insert(i).second) << "position " << p << " repeats " << i;
    }
    // The end of the epoch too (positions near n), where 64-bit arithmetic would wrap.
    for (uint64_t p = n - 3000; p < n; ++p) {
      const uint64_t i = sampler.index(1, p);
      ASSERT_LT(i, n) << "position " << p;
      ASSERT_TRUE(seen.insert(i).second) << "position " << p << " repeats " << i;
    }
    // Indices spread over the whole range rather than clustering near 0.
    EXPECT_GT(*std::max_element(seen.begin(), seen.end()), n / 2);
  }
}

TEST(ShuffledSampler, PositionOutsideTheEpochThrows) {
  EXPECT_THROW(ShuffledSampler(0, 1).index(0, 0), Error);
  const ShuffledSampler sampler(10, 1);
  EXPECT_NO_THROW(sampler.index(0, 9));
  EXPECT_THROW(sampler.index(0, 10), Error);
  EXPECT_THROW(sampler.index(5, ~uint64_t{0}), Error);
  try {
    sampler.index(2, 10);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("position 10"), std::string::npos) << e.what();
  }
}

TEST(ShuffledSampler, DescribesItsSizeAndSeed) {
  EXPECT_EQ(ShuffledSampler(1000, 17).describe(), "shuffled(size=1000, seed=17)");
}

}  // namespace
}  // namespace ferry
