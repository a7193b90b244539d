#include <ferry/io/samplers/shard_shuffle_sampler.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ferry/io/samplers/sharded_sampler.h>
#include <ferry/pipeline/error.h>
#include "tests/support/error_text.h"
#include "tests/support/sampler_orders.h"

namespace ferry {
namespace {

using Options = ShardShuffleSampler::Options;
using Remainder = ShardedSampler::Remainder;

constexpr uint64_t kTestSeed = 20240917;

using testing::epoch_order;
using testing::is_permutation_of_range;

uint64_t total(const std::vector<uint64_t>& sizes) { return std::accumulate(sizes.begin(), sizes.end(), uint64_t{0}); }

// Random shard sizes, about a quarter of them empty, at least one sample in all.
std::vector<uint64_t> random_shard_sizes(std::mt19937_64& rng, size_t max_shards, uint64_t max_size) {
  std::uniform_int_distribution<size_t> count(1, max_shards);
  std::uniform_int_distribution<uint64_t> size(1, max_size);
  std::vector<uint64_t> sizes(count(rng));
  for (uint64_t& s : sizes) s = rng() % 4 == 0 ? 0 : size(rng);
  if (total(sizes) == 0) sizes.back() = size(rng);
  return sizes;
}

std::string sizes_text(const std::vector<uint64_t>& sizes) {
  std::string text = "{";
  for (const uint64_t s : sizes) text += std::to_string(s) + ",";
  return text + "}";
}

// shard_begin[s] as TarShardSource numbers samples: shard 0 first.
std::vector<uint64_t> shard_begins(const std::vector<uint64_t>& sizes) {
  std::vector<uint64_t> begin(sizes.size(), 0);
  for (size_t s = 1; s < sizes.size(); ++s) begin[s] = begin[s - 1] + sizes[s - 1];
  return begin;
}

// Where the (buffer-less) stream of `options`' epoch has each sample: buffer 1 gives the stream,
// because the shard order does not depend on the buffer (the class comment says so).
std::vector<uint64_t> stream_positions(const std::vector<uint64_t>& sizes, Options options, uint64_t epoch) {
  options.buffer_size = 1;
  const auto stream = epoch_order(ShardShuffleSampler(sizes, options), epoch);
  std::vector<uint64_t> position(stream.size());
  for (uint64_t p = 0; p < stream.size(); ++p) position[stream[p]] = p;
  return position;
}

TEST(ShardShuffleSampler, EveryEpochIsAPermutationOfAllSamples) {
  std::mt19937_64 rng(kTestSeed);
  std::vector<std::vector<uint64_t>> size_sets = {{1}, {5}, {0, 3}, {3, 0}, {0, 0, 1, 0}, {1, 1, 1, 1}};
  for (int i = 0; i < 25; ++i) size_sets.push_back(random_shard_sizes(rng, 40, 300));
  for (const auto& sizes : size_sets) {
    const uint64_t n = total(sizes);
    for (const size_t buffer :
         {size_t{1}, size_t{2}, size_t{7}, size_t{1000}, static_cast<size_t>(n), static_cast<size_t>(n + 5)}) {
      for (const bool shuffle_shards : {true, false}) {
        const Options options{rng(), buffer, shuffle_shards};
        SCOPED_TRACE("sizes " + sizes_text(sizes) + ", buffer " + std::to_string(buffer) + ", seed " +
                     std::to_string(options.seed) + (shuffle_shards ? "" : ", shards in order"));
        const ShardShuffleSampler sampler(sizes, options);
        ASSERT_EQ(sampler.epoch_size(), n);
        ASSERT_EQ(sampler.bytes_per_sample(), 4u);
        for (const uint64_t epoch : {0u, 1u, 7u, 1000u}) {
          const auto order = epoch_order(sampler, epoch);
          ASSERT_TRUE(is_permutation_of_range(order)) << "epoch " << epoch;
          // The cached 32-bit path and the uncached 64-bit one agree.
          ASSERT_EQ(order, detail::shard_shuffle_order(sizes, options, epoch)) << "epoch " << epoch;
        }
      }
    }
  }
}

TEST(ShardShuffleSampler, SameSeedAndEpochGiveTheSameOrderFromAFreshSampler) {
  // A fresh sampler is what a resumed run builds: it must continue the very same epoch.
  std::mt19937_64 rng(kTestSeed + 1);
  for (int i = 0; i < 20; ++i) {
    const auto sizes = random_shard_sizes(rng, 30, 500);
    const Options options{rng(), static_cast<size_t>(rng() % 200 + 1), rng() % 2 == 0};
    const uint64_t epoch = rng() % 100;
    SCOPED_TRACE("sizes " + sizes_text(sizes) + ", seed " + std::to_string(options.seed));
    const ShardShuffleSampler a(sizes, options);
    const ShardShuffleSampler b(sizes, options);
    const auto expected = epoch_order(a, epoch);
    EXPECT_EQ(epoch_order(b, epoch), expected);
    // Starting mid-epoch (no earlier index() of it on b's fresh twin) gives the same tail.
    const ShardShuffleSampler c(sizes, options);
    const uint64_t from = rng() % expected.size();
    for (uint64_t p = from; p < expected.size(); ++p) ASSERT_EQ(c.index(epoch, p), expected[p]) << "position " << p;
  }
}

TEST(ShardShuffleSampler, DifferentEpochsAndSeedsGiveDifferentOrders) {
  std::mt19937_64 rng(kTestSeed + 2);
  for (int i = 0; i < 20; ++i) {
    std::vector<uint64_t> sizes = random_shard_sizes(rng, 30, 500);
    sizes.push_back(50);  // at least 50 samples, so that a repeat by chance is out of the question
    for (const size_t buffer : {size_t{1}, size_t{16}, size_t{100000}}) {
      const Options options{rng(), buffer, true};
      SCOPED_TRACE("sizes " + sizes_text(sizes) + ", buffer " + std::to_string(buffer) + ", seed " +
                   std::to_string(options.seed));
      const ShardShuffleSampler sampler(sizes, options);
      const Options other_seed{options.seed + 1, buffer, true};
      const ShardShuffleSampler other(sizes, other_seed);
      const auto e0 = epoch_order(sampler, 0);
      if (buffer == 1 && std::count_if(sizes.begin(), sizes.end(), [](uint64_t s) { return s > 0; }) < 6) {
        continue;  // few non-empty shards: two shard orders may coincide by chance
      }
      EXPECT_NE(e0, epoch_order(sampler, 1));
      EXPECT_NE(e0, epoch_order(sampler, 2));
      EXPECT_NE(e0, epoch_order(other, 0));
    }
  }
}

TEST(ShardShuffleSampler, IndexIsTheSameInAnyOrderAndFromSeveralThreads) {
  std::mt19937_64 rng(kTestSeed + 3);
  const auto sizes = random_shard_sizes(rng, 60, 1000);
  const uint64_t n = total(sizes);
  const Options options{99, 500, true};
  std::vector<std::vector<uint64_t>> expected;
  for (uint64_t epoch = 0; epoch < 5; ++epoch) expected.push_back(detail::shard_shuffle_order(sizes, options, epoch));

  {  // One thread: backwards, then at random over more epochs than the cache holds (recomputation).
    const ShardShuffleSampler sampler(sizes, options);
    for (uint64_t p = n; p-- > 0;) ASSERT_EQ(sampler.index(1, p), expected[1][p]);
    for (int i = 0; i < 3000; ++i) {
      const uint64_t epoch = rng() % 5;
      const uint64_t p = rng() % n;
      ASSERT_EQ(sampler.index(epoch, p), expected[epoch][p]) << "epoch " << epoch << " position " << p;
    }
  }

  for (const unsigned threads : {2u, 4u, 8u}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    // A fresh sampler each time, so the threads race to compute the first epochs.
    const ShardShuffleSampler sampler(sizes, options);
    const ShardShuffleSampler small({3, 0, 40, 17}, Options{5, 8, true});  // cheap to recompute
    std::vector<std::vector<uint64_t>> small_expected;
    for (uint64_t epoch = 0; epoch < 4; ++epoch) small_expected.push_back(epoch_order(small, epoch));

    std::vector<uint64_t> mismatches(threads, 0);
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937_64 local(kTestSeed + 100 + t);
        // Two epochs at once, as across an epoch boundary: both stay cached.
        for (int i = 0; i < 100000; ++i) {
          const uint64_t epoch = local() % 2;
          const uint64_t p = local() % n;
          mismatches[t] += sampler.index(epoch, p) != expected[epoch][p];
        }
        // Four epochs at once: entries are evicted and recomputed while other threads read them.
        for (int i = 0; i < 5000; ++i) {
          const uint64_t epoch = local() % 4;
          const uint64_t p = local() % small.epoch_size();
          mismatches[t] += small.index(epoch, p) != small_expected[epoch][p];
        }
      });
    }
    for (auto& worker : workers) worker.join();
    for (unsigned t = 0; t < threads; ++t) EXPECT_EQ(mismatches[t], 0u) << "thread " << t;
  }
}

TEST(ShardShuffleSampler, BufferOfOneWithShardsInOrderIsSequential) {
  const std::vector<uint64_t> sizes = {4, 0, 7, 1, 0, 12};
  const ShardShuffleSampler sampler(sizes, Options{3, 1, false});
  std::vector<uint64_t> sequential(total(sizes));
  std::iota(sequential.begin(), sequential.end(), uint64_t{0});
  for (const uint64_t epoch : {0u, 1u, 5u}) EXPECT_EQ(epoch_order(sampler, epoch), sequential) << "epoch " << epoch;
}

TEST(ShardShuffleSampler, BufferOfOneReadsWholeShardsInAShuffledOrder) {
  std::mt19937_64 rng(kTestSeed + 4);
  std::vector<uint64_t> sizes;
  while (std::count_if(sizes.begin(), sizes.end(), [](uint64_t s) { return s > 0; }) < 8) {
    sizes = random_shard_sizes(rng, 40, 50);  // enough shards that file order cannot come up by chance
  }
  const auto begin = shard_begins(sizes);
  const uint64_t n = total(sizes);
  const ShardShuffleSampler sampler(sizes, Options{11, 1, true});
  std::vector<std::vector<size_t>> shard_orders;
  for (uint64_t epoch = 0; epoch < 6; ++epoch) {
    SCOPED_TRACE("sizes " + sizes_text(sizes) + ", epoch " + std::to_string(epoch));
    const auto order = epoch_order(sampler, epoch);
    // Cut the order into runs of consecutive indices; each run must be one whole shard, ascending.
    std::vector<size_t> shards;
    uint64_t p = 0;
    while (p < n) {
      const auto s = static_cast<size_t>(std::upper_bound(begin.begin(), begin.end(), order[p]) - begin.begin() - 1);
      // Empty shards share their begin with the next one; upper_bound finds the non-empty one.
      ASSERT_GT(sizes[s], 0u);
      ASSERT_EQ(order[p], begin[s]) << "position " << p << " starts inside shard " << s;
      for (uint64_t k = 0; k < sizes[s]; ++k) ASSERT_EQ(order[p + k], begin[s] + k) << "position " << p + k;
      shards.push_back(s);
      p += sizes[s];
    }
    std::vector<size_t> sorted = shards;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) << "a shard read twice";
    EXPECT_FALSE(std::is_sorted(shards.begin(), shards.end())) << "shards in file order";
    shard_orders.push_back(shards);
  }
  for (size_t e = 1; e < shard_orders.size(); ++e) EXPECT_NE(shard_orders[e], shard_orders[0]) << "epoch " << e;
}

TEST(ShardShuffleSampler, SamplesStayNearTheirStreamPosition) {
  // The bound tested, with C = min(buffer_size, n): a sample is emitted at output position p >= s - (C - 1),
  // where s is its stream position (the buffer's slot it leaves was filled at stream step s, whose
  // output position is s - C, and it can leave only at a later step). How late it comes is not bounded
  // but geometric with mean C (per step it leaves with probability 1/C): we check that the mean of
  // |p - s| stays below 2C and that no sample comes more than C (ln n + 10) late (each of the n samples
  // does with probability about e^-10 / n; the seeds are fixed anyway).
  std::mt19937_64 rng(kTestSeed + 5);
  for (int i = 0; i < 12; ++i) {
    const auto sizes = random_shard_sizes(rng, 50, 400);
    const uint64_t n = total(sizes);
    for (const size_t buffer : {size_t{2}, size_t{7}, size_t{64}, size_t{1000}}) {
      const Options options{rng(), buffer, true};
      SCOPED_TRACE("sizes " + sizes_text(sizes) + ", buffer " + std::to_string(buffer) + ", seed " +
                   std::to_string(options.seed));
      const ShardShuffleSampler sampler(sizes, options);
      const auto c = static_cast<double>(std::min<uint64_t>(buffer, n));
      for (const uint64_t epoch : {0u, 3u}) {
        const auto stream = stream_positions(sizes, options, epoch);
        const auto order = epoch_order(sampler, epoch);
        double sum_distance = 0;
        for (uint64_t p = 0; p < n; ++p) {
          const auto s = static_cast<double>(stream[order[p]]);
          const auto out = static_cast<double>(p);
          ASSERT_GE(out, s - (c - 1)) << "position " << p << " emits stream position " << s << " too early";
          ASSERT_LE(out - s, c * (std::log(static_cast<double>(n)) + 10)) << "position " << p << " too late";
          sum_distance += std::abs(out - s);
        }
        EXPECT_LT(sum_distance / static_cast<double>(n), 2 * c) << "epoch " << epoch;
      }
    }
  }
}

// Pearson's chi-squared statistic of `counts` against equal expected counts.
double chi_squared(const std::vector<uint64_t>& counts) {
  const double expected = static_cast<double>(std::accumulate(counts.begin(), counts.end(), uint64_t{0})) /
                          static_cast<double>(counts.size());
  double chi2 = 0;
  for (const uint64_t c : counts) {
    const double d = static_cast<double>(c) - expected;
    chi2 += d * d / expected;
  }
  return chi2;
}

TEST(ShardShuffleSampler, TheFirstSampleIsDrawnUniformlyFromTheFilledBuffer) {
  // Position 0 is a uniform draw from the first C stream samples. Over 3200 epochs each of the 16 stream
  // positions is expected 200 times; chi-squared with 15 degrees of freedom has mean 15 and exceeds 60
  // with probability about 1e-7 (and the seed is fixed, so the test cannot flicker).
  const std::vector<uint64_t> sizes = {30, 0, 25, 40, 10, 35};
  const size_t buffer = 16;
  const Options options{kTestSeed, buffer, true};
  const ShardShuffleSampler sampler(sizes, options);
  std::vector<uint64_t> counts(buffer, 0);
  for (uint64_t epoch = 0; epoch < 3200; ++epoch) {
    const uint64_t s = stream_positions(sizes, options, epoch)[sampler.index(epoch, 0)];
    ASSERT_LT(s, buffer) << "epoch " << epoch;
    ++counts[s];
  }
  for (size_t s = 0; s < buffer; ++s) EXPECT_GT(counts[s], 100u) << "stream position " << s;
  EXPECT_LT(chi_squared(counts), 60.0);
}

TEST(ShardShuffleSampler, ABufferAsLargeAsTheEpochShufflesItFully) {
  // Shards in file order and buffer >= n: position 0 is uniform over all 40 samples. 4000 epochs, 100
  // expected each; chi-squared with 39 degrees of freedom exceeds 100 with probability about 1e-7.
  const std::vector<uint64_t> sizes = {10, 10, 10, 10};
  const ShardShuffleSampler sampler(sizes, Options{kTestSeed, 1000, false});
  std::vector<uint64_t> counts(40, 0);
  for (uint64_t epoch = 0; epoch < 4000; ++epoch) ++counts[sampler.index(epoch, 0)];
  EXPECT_LT(chi_squared(counts), 100.0);

  // And one large epoch looks like a random permutation, not a slightly disturbed stream.
  const ShardShuffleSampler big({2500, 2500, 2500, 2500}, Options{7, 10000, false});
  const auto order = epoch_order(big, 0);
  uint64_t fixed = 0;
  uint64_t ascending = 0;
  for (uint64_t p = 0; p < order.size(); ++p) {
    fixed += order[p] == p;
    if (p > 0) ascending += order[p] > order[p - 1];
  }
  EXPECT_LT(fixed, 20u);  // a random permutation has about 1
  EXPECT_GT(ascending, order.size() * 4 / 10);
  EXPECT_LT(ascending, order.size() * 6 / 10);
}

TEST(ShardShuffleSampler, ShardedOverRanksVisitsEverySampleOncePerEpoch) {
  std::mt19937_64 rng(kTestSeed + 6);
  std::vector<std::vector<uint64_t>> size_sets = {{1}, {0, 2, 1}, {3, 0, 2}};  // fewer samples than ranks
  for (int i = 0; i < 8; ++i) size_sets.push_back(random_shard_sizes(rng, 20, 100));
  for (const auto& sizes : size_sets) {
    const uint64_t n = total(sizes);
    const auto inner = std::make_shared<ShardShuffleSampler>(sizes, Options{rng(), 1 + rng() % 50, true});
    for (uint64_t w = 1; w <= 8; ++w) {
      for (const Remainder remainder : {Remainder::kPad, Remainder::kDrop}) {
        SCOPED_TRACE("sizes " + sizes_text(sizes) + ", world_size " + std::to_string(w) + ", " + inner->describe() +
                     (remainder == Remainder::kPad ? ", pad" : ", drop"));
        const uint64_t epoch = rng() % 5;
        std::map<uint64_t, uint64_t> count;
        for (uint64_t r = 0; r < w; ++r) {
          const ShardedSampler rank(inner, r, w, remainder);
          ASSERT_EQ(rank.epoch_size(), remainder == Remainder::kPad ? (n + w - 1) / w : n / w);
          for (uint64_t p = 0; p < rank.epoch_size(); ++p) ++count[rank.index(epoch, p)];
        }
        if (remainder == Remainder::kDrop) {
          // Exactly once each, and only the epoch's last n % W samples missing.
          EXPECT_EQ(count.size(), n / w * w);
          for (const auto& [sample, times] : count) ASSERT_EQ(times, 1u) << "sample " << sample;
          for (uint64_t p = n / w * w; p < n; ++p) EXPECT_EQ(count.count(inner->index(epoch, p)), 0u);
        } else {
          // Every sample at least once; the ceil(n/W)*W global positions wrap around the epoch, so the
          // padding repeats its first samples (more than once when W > n).
          EXPECT_EQ(count.size(), n);
          const uint64_t global = (n + w - 1) / w * w;
          for (uint64_t p = 0; p < n; ++p) {
            const uint64_t expected = global / n + (p < global % n ? 1 : 0);
            ASSERT_EQ(count[inner->index(epoch, p)], expected) << "epoch position " << p;
          }
        }
      }
    }
  }
}

// A fingerprint of a whole order: FNV-1a over its values, so a large epoch can be pinned in one number.
uint64_t fingerprint(const std::vector<uint64_t>& order) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const uint64_t v : order) h = (h ^ v) * 0x100000001b3ULL;
  return h;
}

TEST(ShardShuffleSampler, PinsTheOrderSoEveryMachineAgrees) {
  // The order is part of the resume contract (a resumed run on another host or compiler must continue
  // the same epoch, and every rank must compute the same one), so a change to the draws must be
  // deliberate: it changes these values. Only fixed-width integer arithmetic goes into them.
  // tests/io/samplers/shard_shuffle_reference.py, an independent Python model of the class comment's algorithm
  // (a list buffer, not the in-place one), prints the same four values.
  const std::vector<uint64_t> sizes = {5, 0, 3, 8, 4, 6, 2};
  // Buffer 1: whole shards in the epoch's shard order.
  EXPECT_EQ(epoch_order(ShardShuffleSampler(sizes, Options{42, 1, true}), 3),
            (std::vector<uint64_t>{16, 17, 18, 19, 26, 27, 20, 21, 22, 23, 24, 25, 5, 6,
                                   7,  8,  9,  10, 11, 12, 13, 14, 15, 0,  1,  2,  3, 4}));
  EXPECT_EQ(epoch_order(ShardShuffleSampler(sizes, Options{42, 4, true}), 3),
            (std::vector<uint64_t>{18, 26, 27, 19, 21, 16, 22, 24, 17, 23, 25, 7, 5, 6,
                                   9,  10, 12, 8,  20, 13, 15, 11, 0,  2,  3,  4, 1, 14}));
  EXPECT_EQ(epoch_order(ShardShuffleSampler(sizes, Options{7, 100, false}), 0),
            (std::vector<uint64_t>{5,  17, 11, 14, 21, 3, 2,  24, 25, 27, 19, 1,  10, 12,
                                   26, 7,  0,  18, 16, 9, 22, 8,  4,  20, 15, 23, 6,  13}));
  // 200 shards of 0 to 100 samples, a 1000-sample buffer.
  std::vector<uint64_t> many(200);
  for (uint64_t s = 0; s < many.size(); ++s) many[s] = s * 37 % 101;
  const ShardShuffleSampler big(many, Options{123456789, 1000, true});
  EXPECT_EQ(fingerprint(epoch_order(big, 9)), 1011897037380129593ULL);
}

TEST(ShardShuffleSampler, UsesEightBytesPerSampleOnlyFrom2To32Samples) {
  // Construction computes no order, so these cost nothing.
  const ShardShuffleSampler narrow({uint64_t{0xffffffff}}, Options{1, 10, true});
  EXPECT_EQ(narrow.bytes_per_sample(), 4u);
  const ShardShuffleSampler wide({uint64_t{0xffffffff}, 1}, Options{1, 10, true});
  EXPECT_EQ(wide.bytes_per_sample(), 8u);
  EXPECT_EQ(wide.epoch_size(), uint64_t{1} << 32);
  EXPECT_THROW(wide.index(0, uint64_t{1} << 32), Error);
}

TEST(ShardShuffleSampler, ComputingAnEpochOfTenMillionSamplesTakes) {
  // Not a threshold (timings belong in benchmark reports): prints the cost of an epoch's first index(),
  // which the class comment quotes. 1000 shards of 10000 samples, a 10000-sample buffer.
  const ShardShuffleSampler sampler(std::vector<uint64_t>(1000, 10000), Options{1, 10000, true});
  const auto start = std::chrono::steady_clock::now();
  const uint64_t first = sampler.index(0, 0);
  const auto computed = std::chrono::steady_clock::now();
  uint64_t sum = first;
  for (uint64_t p = 1; p < sampler.epoch_size(); ++p) sum += sampler.index(0, p);
  const auto read = std::chrono::steady_clock::now();
  using Ms = std::chrono::duration<double, std::milli>;
  std::printf("shard shuffle, 10M samples: first index() %.1f ms (order %.0f MB), then %.1f ns per index()\n",
              Ms(computed - start).count(), 10e6 * sampler.bytes_per_sample() / 1e6,
              Ms(read - computed).count() * 1e6 / 10e6);
  EXPECT_EQ(sum, uint64_t{10000000} * 9999999 / 2);  // a permutation of 0..n-1
}

TEST(ShardShuffleSampler, RejectsBadArgumentsNamingThem) {
  EXPECT_TRUE(testing::error_names([] { ShardShuffleSampler({}, Options{1, 10, true}); }, "no shards"));
  EXPECT_TRUE(testing::error_names(
      [] {
        ShardShuffleSampler({0, 0, 0}, Options{1, 10, true});
      },
      "all 3 shards are empty"));
  EXPECT_TRUE(testing::error_names([] { ShardShuffleSampler({5}, Options{1, 0, true}); }, "buffer_size"));
  EXPECT_TRUE(testing::error_names([] { ShardShuffleSampler({~uint64_t{0}, 1}, Options{1, 1, true}); }, "2^64"));
  const ShardShuffleSampler sampler({3, 4}, Options{1, 2, true});
  EXPECT_NO_THROW(sampler.index(0, 6));
  EXPECT_TRUE(testing::error_names([&] { sampler.index(2, 7); }, "position 7"));
  EXPECT_THROW(sampler.index(0, ~uint64_t{0}), Error);
}

TEST(ShardShuffleSampler, DescribesSeedShardsAndBuffer) {
  EXPECT_EQ(ShardShuffleSampler(std::vector<uint64_t>(16, 10), Options{7, 1000, true}).describe(),
            "shard_shuffle(seed=7, 16 shards, buffer=1000)");
  EXPECT_EQ(ShardShuffleSampler({1, 2}, Options{3, 1, false}).describe(),
            "shard_shuffle(seed=3, 2 shards, buffer=1, shards in order)");
  const auto inner = std::make_shared<ShardShuffleSampler>(std::vector<uint64_t>{4, 4}, Options{5, 2, true});
  EXPECT_EQ(ShardedSampler(inner, 1, 2, Remainder::kPad).describe(),
            "sharded(rank=1/2, pad, shard_shuffle(seed=5, 2 shards, buffer=2))");
}

}  // namespace
}  // namespace ferry
