#include <ferry/io/util/mixture_schedule.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iostream>
#include <limits>
#include <numbers>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ferry/pipeline/error.h>
#include "tests/support/error_text.h"

namespace ferry {
namespace {

using Mode = MixtureSchedule::Mode;

constexpr uint64_t kTestSeed = 20240611;

std::string show(const std::vector<double>& weights) {
  std::string text;
  for (const double w : weights) text += (text.empty() ? "" : ", ") + std::to_string(w);
  return "weights (" + text + ")";
}

// ---- Megatron-LM's blending, written out plainly ----

// numpy.sum of a float64 vector: numpy's pairwise summation within each 8192-element buffer, the
// buffers added in turn to 0.
double numpy_pairwise(const double* a, size_t n) {
  if (n < 8) return std::accumulate(a, a + n, 0.0);
  if (n > 128) {
    const size_t half = n / 2 - n / 2 % 8;
    return numpy_pairwise(a, half) + numpy_pairwise(a + half, n - half);
  }
  double r[8];
  std::copy(a, a + 8, r);
  const size_t whole = n - n % 8;
  for (size_t i = 8; i < whole; ++i) r[i % 8] += a[i];
  double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
  for (size_t i = whole; i < n; ++i) sum += a[i];
  return sum;
}

std::vector<double> megatron_normalize(std::vector<double> w) {
  double sum = 0;
  for (size_t start = 0; start < w.size(); start += 8192) {
    sum += numpy_pairwise(w.data() + start, std::min<size_t>(8192, w.size() - start));
  }
  for (double& v : w) v = v / sum;
  return w;
}

struct Drawn {
  std::vector<size_t> source;
  std::vector<uint64_t> before;
};

// megatron/core/datasets/helpers.cpp, build_blending_indices, fed as BlendedMegatronDatasetBuilder feeds
// it (weights normalized by the builder, then again by BlendedDataset). Products are rounded before the
// subtraction, as there.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
Drawn megatron_blend(const std::vector<double>& weights, size_t size) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  const std::vector<double> w = megatron_normalize(megatron_normalize(weights));
  std::vector<int64_t> current(w.size(), 0);
  Drawn drawn;
  for (size_t sample = 0; sample < size; ++sample) {
    const double x = std::max(static_cast<double>(sample), 1.0);
    size_t best = 0;
    double best_error = w[0] * x - static_cast<double>(current[0]);
    for (size_t k = 1; k < w.size(); ++k) {
      const double error = w[k] * x - static_cast<double>(current[k]);
      if (error > best_error) {
        best_error = error;
        best = k;
      }
    }
    drawn.source.push_back(best);
    drawn.before.push_back(static_cast<uint64_t>(current[best]));
    ++current[best];
  }
  return drawn;
}

// 2..100 weights, some tiny next to large ones, some round decimals, some repeated.
std::vector<double> random_weights(std::mt19937_64& rng, size_t lowest = 2, size_t highest = 100) {
  const size_t n = std::uniform_int_distribution<size_t>(lowest, highest)(rng);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> weights;
  for (size_t k = 0; k < n; ++k) {
    switch (rng() % 5) {
      case 0: weights.push_back(unit(rng)); break;
      case 1: weights.push_back(1e-4 * (1 + unit(rng))); break;
      case 2: weights.push_back(static_cast<double>(rng() % 100 + 1)); break;
      case 3: weights.push_back(static_cast<double>(rng() % 1000 + 1) / 1000); break;
      default: weights.push_back(weights.empty() ? 1.0 : weights[rng() % weights.size()]); break;
    }
  }
  return weights;
}

TEST(MixtureSchedule, MegatronModeMatchesMegatronsLoopInOrderAtRandomAndInCounts) {
  std::mt19937_64 rng(kTestSeed);
  constexpr size_t kPositions = 20000;
  for (int trial = 0; trial < 12; ++trial) {
    const std::vector<double> weights = random_weights(rng);
    SCOPED_TRACE("test seed " + std::to_string(kTestSeed) + ", trial " + std::to_string(trial) + ", " + show(weights));
    const Drawn expected = megatron_blend(weights, kPositions);
    {
      const MixtureSchedule in_order(weights, Mode::kMegatron);
      for (size_t p = 0; p < kPositions; ++p) {
        const MixtureSchedule::Pick pick = in_order.at(p);
        ASSERT_EQ(pick.source, expected.source[p]) << "position " << p;
        ASSERT_EQ(pick.before, expected.before[p]) << "position " << p;
      }
    }
    const MixtureSchedule random_order(weights, Mode::kMegatron);
    std::vector<uint64_t> positions(kPositions);
    std::iota(positions.begin(), positions.end(), uint64_t{0});
    std::shuffle(positions.begin(), positions.end(), rng);
    positions.resize(3000);
    for (const uint64_t p : positions) {
      const MixtureSchedule::Pick pick = random_order.at(p);
      ASSERT_EQ(pick.source, expected.source[p]) << "position " << p;
      ASSERT_EQ(pick.before, expected.before[p]) << "position " << p;
    }
    std::sort(positions.begin(), positions.begin() + 50);
    std::vector<uint64_t> seen(weights.size(), 0);
    size_t next = 0;
    for (size_t p = 0; p <= kPositions; ++p) {
      if (next < 50 && p == positions[next]) {
        ASSERT_EQ(random_order.counts(p), seen) << "position " << p;
        ++next;
      }
      if (p < kPositions) ++seen[expected.source[p]];
    }
    EXPECT_EQ(random_order.counts(kPositions), seen);
  }
}

// FNV-1a over the bits of doubles.
uint64_t hash_bits(const std::vector<double>& values) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const double v : values) {
    const auto bits = std::bit_cast<uint64_t>(v);
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (bits >> (8 * byte)) & 0xff;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

TEST(MixtureSchedule, MegatronModeSharesAreNumpysNormalizedWeightsBitForBit) {
  // Pinned from numpy 1.24: normalize(normalize(w)) with Megatron's normalize(), for these formula
  // weights (exact in any IEEE double arithmetic), hashed as hash_bits() does:
  //   w_i = float((i * 7919) % 1009 + 1) / 13.0 * (1e-4 if i % 5 == 0 else 1.0)
  // The sizes cross numpy's summation thresholds (8, 128, and its 8192-element buffer).
  const std::vector<std::pair<size_t, uint64_t>> pinned = {
      {1, 0xaab1693229ba1db8ULL},    {2, 0x32a28d34ff5549f7ULL},     {7, 0x97207e4fdcc342d2ULL},
      {8, 0x6af20994b4f7908cULL},    {9, 0xe1f2b79becdb6d0bULL},     {16, 0x1b529e40be1de01aULL},
      {17, 0xbde58cd640c63735ULL},   {127, 0xd2e62dd576e49d35ULL},   {128, 0xd8092c7bef703372ULL},
      {129, 0xf74c1d80a6a8ff3cULL},  {255, 0x3e8e7f97c6accca8ULL},   {256, 0x4d5104d1429b81ffULL},
      {300, 0x6c9023f1e430acb7ULL},  {1000, 0x4b074b527fe07c5bULL},  {8192, 0x5ea4f902c48093f0ULL},
      {8193, 0x0cabbd02f148bdf5ULL}, {20000, 0x3948e2e7643b697fULL}, {32766, 0x367a8433d9d0e1e3ULL},
  };
  for (const auto& [n, expected] : pinned) {
    std::vector<double> weights;
    for (size_t i = 0; i < n; ++i) {
      weights.push_back(static_cast<double>((i * 7919) % 1009 + 1) / 13.0 * (i % 5 == 0 ? 1e-4 : 1.0));
    }
    const MixtureSchedule schedule(weights, Mode::kMegatron);
    EXPECT_EQ(hash_bits(schedule.shares()), expected) << n << " weights";
  }
}

TEST(MixtureSchedule, MegatronModePinsMegatronsOrder) {
  // From Megatron-LM's normalize() (numpy 1.24) and build_blending_indices, run in Python.
  const std::vector<std::pair<std::vector<double>, std::string>> pinned = {
      {{0.6, 0.3, 0.1}, "012001001001200100100120010010012001001001020100100102010010"},
      {{0.5, 0.3, 0.2}, "012010201001201020100120102010012010201001201020100120102010"},
      {{0.7, 0.3}, "010010010001001001000100100100010010010001001001000100100100"},
      {{30, 70}, "101101101101110110110111011011011101101101110110110111011011"},
      {{1e-4, 1, 0.25}, "121110112111121111211112111121111211112111121111211112111121"},
  };
  for (const auto& [weights, order] : pinned) {
    const MixtureSchedule schedule(weights, Mode::kMegatron);
    std::string got;
    for (uint64_t p = 0; p < order.size(); ++p) got += static_cast<char>('0' + schedule.at(p).source);
    EXPECT_EQ(got, order) << show(weights);
  }
}

TEST(MixtureSchedule, MegatronModeSkipsZeroWeightsAsIfTheirSourcesWereNotInTheBlend) {
  const std::vector<double> weights = {0, 0.5, 0, 0.3, 0.2, 0};
  const std::vector<size_t> kept = {1, 3, 4};
  const Drawn expected = megatron_blend({0.5, 0.3, 0.2}, 5000);
  const MixtureSchedule schedule(weights, Mode::kMegatron);
  for (size_t p = 0; p < 5000; ++p) {
    const MixtureSchedule::Pick pick = schedule.at(p);
    ASSERT_EQ(pick.source, kept[expected.source[p]]) << "position " << p;
    ASSERT_EQ(pick.before, expected.before[p]) << "position " << p;
  }
  EXPECT_EQ(schedule.shares()[0], 0.0);
  EXPECT_EQ(schedule.shares()[2], 0.0);
}

TEST(MixtureSchedule, MegatronModeRandomAccessStaysRightAfterCheckpointsAreThinned) {
  // With 3 sources, checkpoints every 1024 positions reach their cap (65536) at 67 million positions
  // and are thinned to every 2048; answers past and before that must still match the in-order walk.
  std::mt19937_64 rng(kTestSeed + 1);
  const std::vector<double> weights = {0.5, 0.3, 0.2};
  constexpr uint64_t kLength = 70'000'000;
  std::vector<uint64_t> probes;
  for (int i = 0; i < 300; ++i) probes.push_back(rng() % kLength);
  probes.push_back(kLength - 1);
  std::sort(probes.begin(), probes.end());
  const MixtureSchedule walked(weights, Mode::kMegatron);
  std::vector<MixtureSchedule::Pick> expected;
  size_t next = 0;
  for (uint64_t p = 0; next < probes.size(); ++p) {
    const MixtureSchedule::Pick pick = walked.at(p);
    for (; next < probes.size() && probes[next] == p; ++next) expected.push_back(pick);
  }
  const MixtureSchedule jumping(weights, Mode::kMegatron);
  std::vector<size_t> order(probes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), rng);
  for (const size_t i : order) {
    const MixtureSchedule::Pick pick = jumping.at(probes[i]);
    ASSERT_EQ(pick.source, expected[i].source) << "position " << probes[i];
    ASSERT_EQ(pick.before, expected[i].before) << "position " << probes[i];
  }
}

// ---- kSmooth ----

// Weight sets for kSmooth: round decimals (short periods), integers, skewed sets and arbitrary doubles
// (quantized to a period of 2^24).
std::vector<std::vector<double>> smooth_weight_sets(std::mt19937_64& rng) {
  std::vector<std::vector<double>> sets = {
      {0.7, 0.3}, {0.5, 0.3, 0.2},       {0.6, 0.3, 0.1},       {0.5, 0.25, 0.25},  {0.9, 0.05, 0.05},          {2, 1},
      {1e-4, 1},  {1, 1, 1, 1, 1, 1, 1}, {0.001, 0.002, 0.997}, {1.0 / 3, 2.0 / 3}, {3.14159, 2.71828, 1.41421}};
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int i = 0; i < 30; ++i) {
    const size_t n = 2 + rng() % 12;
    std::vector<double> weights;
    for (size_t k = 0; k < n; ++k) {
      switch (i % 3) {
        case 0: weights.push_back(static_cast<double>(rng() % 100 + 1) / 100); break;
        case 1: weights.push_back(static_cast<double>(rng() % 20 + 1)); break;
        default: weights.push_back(unit(rng) + (k == 0 ? 0.0 : 1e-3)); break;
      }
    }
    sets.push_back(std::move(weights));
  }
  return sets;
}

TEST(MixtureSchedule, SmoothCountsSumToThePositionAndAgreeInOrderAndAtRandom) {
  std::mt19937_64 rng(kTestSeed + 2);
  for (const std::vector<double>& weights : smooth_weight_sets(rng)) {
    SCOPED_TRACE(show(weights));
    const MixtureSchedule walked(weights, Mode::kSmooth);
    const uint64_t length = std::min<uint64_t>(3 * walked.period() + 7, 30000);
    std::vector<MixtureSchedule::Pick> picks;
    std::vector<std::vector<uint64_t>> counts_before;
    std::vector<uint64_t> seen(weights.size(), 0);
    for (uint64_t p = 0; p < length; ++p) {
      const MixtureSchedule::Pick pick = walked.at(p);
      ASSERT_LT(pick.source, weights.size());
      ASSERT_EQ(pick.before, seen[pick.source]) << "position " << p;
      picks.push_back(pick);
      if (p % 97 == 0) counts_before.push_back(seen);
      ++seen[pick.source];
    }
    const MixtureSchedule jumping(weights, Mode::kSmooth);
    for (int i = 0; i < 500; ++i) {
      const uint64_t p = rng() % length;
      const MixtureSchedule::Pick pick = jumping.at(p);
      ASSERT_EQ(pick.source, picks[p].source) << "position " << p;
      ASSERT_EQ(pick.before, picks[p].before) << "position " << p;
      if (p % 97 == 0) {
        const std::vector<uint64_t> counts = jumping.counts(p);
        ASSERT_EQ(counts, counts_before[p / 97]) << "position " << p;
        ASSERT_EQ(std::accumulate(counts.begin(), counts.end(), uint64_t{0}), p);
      }
    }
  }
}

TEST(MixtureSchedule, SmoothGivesTheSameAnswersFromManyThreadsAtOnce) {
  std::mt19937_64 rng(kTestSeed + 3);
  const std::vector<std::vector<double>> sets = {{0.5, 0.3, 0.2}, random_weights(rng, 30, 30), {3.14159, 2.71828}};
  for (const std::vector<double>& weights : sets) {
    const MixtureSchedule reference(weights, Mode::kSmooth);
    constexpr uint64_t kLength = 40000;
    std::vector<MixtureSchedule::Pick> expected;
    for (uint64_t p = 0; p < kLength; ++p) expected.push_back(reference.at(p));
    for (const unsigned threads : {1u, 2u, 4u, 8u}) {
      SCOPED_TRACE(show(weights) + ", " + std::to_string(threads) + " threads");
      // A fresh schedule, so that the threads race to build its checkpoints. Thread 0 walks in order
      // (as a planner does); the others jump about, moving the cursor under it.
      const MixtureSchedule shared(weights, Mode::kSmooth);
      std::vector<uint64_t> mismatches(threads, 0);
      std::vector<std::thread> workers;
      for (unsigned t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
          std::mt19937_64 local(kTestSeed + t);
          for (uint64_t i = 0; i < kLength; ++i) {
            // The others ask rarely, as in a pipeline: one position in 16.
            if (t != 0 && i % 16 != 0) continue;
            const uint64_t p = t == 0 ? i : local() % kLength;
            const MixtureSchedule::Pick pick = shared.at(p);
            if (pick.source != expected[p].source || pick.before != expected[p].before) ++mismatches[t];
            if (t != 0 && i % 256 == 0) {
              const std::vector<uint64_t> counts = shared.counts(p);
              if (std::accumulate(counts.begin(), counts.end(), uint64_t{0}) != p) ++mismatches[t];
            }
          }
        });
      }
      for (std::thread& worker : workers) worker.join();
      for (unsigned t = 0; t < threads; ++t) EXPECT_EQ(mismatches[t], 0u) << "thread " << t;
    }
  }
}

TEST(MixtureSchedule, SmoothIsPeriodicWithThePeriodOfTheWeightsAsDecimals) {
  EXPECT_EQ(MixtureSchedule({2, 1}, Mode::kSmooth).period(), 3u);
  EXPECT_EQ(MixtureSchedule({0.7, 0.3}, Mode::kSmooth).period(), 10u);
  EXPECT_EQ(MixtureSchedule({0.5, 0.3, 0.2}, Mode::kSmooth).period(), 10u);
  EXPECT_EQ(MixtureSchedule({0.5, 0.25, 0.25}, Mode::kSmooth).period(), 4u);
  EXPECT_EQ(MixtureSchedule({1e-4, 1}, Mode::kSmooth).period(), 10001u);
  EXPECT_EQ(MixtureSchedule({1e20, 3e20}, Mode::kSmooth).period(), 4u);
  EXPECT_EQ(MixtureSchedule({1.0 / 3, 2.0 / 3}, Mode::kSmooth).period(), 3u);  // 0.333...3 and 0.666...6
  EXPECT_EQ(MixtureSchedule({0.1, 0, 0.2}, Mode::kSmooth).period(), 3u);
  // No short common denominator: quantized to 2^24, each share within 2^-24 of the weight's.
  const MixtureSchedule irrational({std::numbers::pi, std::numbers::e, 1e-9}, Mode::kSmooth);
  EXPECT_LE(irrational.period(), uint64_t{1} << 24);
  const double total = std::numbers::pi + std::numbers::e + 1e-9;
  EXPECT_NEAR(irrational.shares()[0], std::numbers::pi / total, 1.0 / (1 << 24));
  EXPECT_NEAR(irrational.shares()[1], std::numbers::e / total, 1.0 / (1 << 24));
  EXPECT_GT(irrational.shares()[2], 0.0);  // a positive weight is never quantized away

  std::mt19937_64 rng(kTestSeed + 4);
  for (const std::vector<double>& weights : smooth_weight_sets(rng)) {
    SCOPED_TRACE(show(weights));
    const MixtureSchedule schedule(weights, Mode::kSmooth);
    const uint64_t d = schedule.period();
    const std::vector<uint64_t> one_period = schedule.counts(d);
    for (size_t k = 0; k < weights.size(); ++k) {
      EXPECT_DOUBLE_EQ(static_cast<double>(one_period[k]) / static_cast<double>(d), schedule.shares()[k]);
    }
    for (int i = 0; i < 200; ++i) {
      // Within the first 100000 offsets of a period, so that long periods are not walked whole here.
      const uint64_t p = rng() % 4 * d + rng() % std::min<uint64_t>(d, 100000);
      const MixtureSchedule::Pick pick = schedule.at(p);
      const MixtureSchedule::Pick later = schedule.at(p + 5 * d);
      EXPECT_EQ(later.source, pick.source) << "position " << p;
      EXPECT_EQ(later.before, pick.before + 5 * one_period[pick.source]) << "position " << p;
    }
  }
}

// The largest |c_k(n) - share_k n| over n = 1, ..., length and all k.
double largest_cumulative_error(const MixtureSchedule& schedule, uint64_t length) {
  std::vector<uint64_t> seen(schedule.sources(), 0);
  double worst = 0;
  for (uint64_t n = 1; n <= length; ++n) {
    ++seen[schedule.at(n - 1).source];
    for (size_t k = 0; k < seen.size(); ++k) {
      worst = std::max(worst, std::abs(static_cast<double>(seen[k]) - schedule.shares()[k] * static_cast<double>(n)));
    }
  }
  return worst;
}

// Over windows of `window` positions starting at 0, 1, ..., starts - 1: the largest amounts by which
// a source's count falls below floor(share * window) and rises above ceil(share * window), and the
// largest |count - share * window|.
struct WindowErrors {
  double below = 0;
  double above = 0;
  double off = 0;
};

WindowErrors window_errors(const MixtureSchedule& schedule, uint64_t window, uint64_t starts) {
  std::vector<size_t> source;
  for (uint64_t p = 0; p < starts + window; ++p) source.push_back(schedule.at(p).source);
  std::vector<int64_t> in_window(schedule.sources(), 0);
  for (uint64_t p = 0; p < window; ++p) ++in_window[source[p]];
  WindowErrors errors;
  for (uint64_t start = 0; start < starts; ++start) {
    for (size_t k = 0; k < in_window.size(); ++k) {
      const double expected = schedule.shares()[k] * static_cast<double>(window);
      const auto count = static_cast<double>(in_window[k]);
      errors.below = std::max(errors.below, std::floor(expected) - count);
      errors.above = std::max(errors.above, count - std::ceil(expected));
      errors.off = std::max(errors.off, std::abs(count - expected));
    }
    --in_window[source[start]];
    ++in_window[source[start + window]];
  }
  return errors;
}

uint64_t shortest_window(const MixtureSchedule& schedule) {
  double smallest = 1;
  for (const double share : schedule.shares()) {
    if (share > 0) smallest = std::min(smallest, share);
  }
  return static_cast<uint64_t>(std::ceil(1 / smallest - 1e-9));
}

TEST(MixtureSchedule, SmoothKeepsEveryPrefixAndEveryWindowNearItsShare) {
  std::mt19937_64 rng(kTestSeed + 5);
  std::vector<std::vector<double>> sets = smooth_weight_sets(rng);
  for (int i = 0; i < 40; ++i) sets.push_back(random_weights(rng, 2, 40));
  double worst_prefix = 0;
  WindowErrors worst_window;
  int windowed = 0;
  for (const std::vector<double>& weights : sets) {
    SCOPED_TRACE(show(weights));
    const MixtureSchedule schedule(weights, Mode::kSmooth);
    // One period covers every n (counts repeat with it); long periods are sampled up to 50000.
    const double prefix = largest_cumulative_error(schedule, std::min<uint64_t>(schedule.period(), 50000));
    EXPECT_LT(prefix, 2.0);
    worst_prefix = std::max(worst_prefix, prefix);
    const uint64_t window = shortest_window(schedule);
    if (window > 20000) continue;  // sets with a tiny share: 20 windows would be too long to walk here
    ++windowed;
    const WindowErrors errors = window_errors(schedule, window, std::max<uint64_t>(20 * window, 2000));
    EXPECT_LE(errors.below, 1.0) << "window " << window;
    EXPECT_LE(errors.above, 1.0) << "window " << window;
    worst_window.below = std::max(worst_window.below, errors.below);
    worst_window.above = std::max(worst_window.above, errors.above);
    worst_window.off = std::max(worst_window.off, errors.off);
  }
  EXPECT_GE(windowed, 40);
  std::cout << sets.size() << " weight sets (" << windowed
            << " with windows); largest |count - share * n| over prefixes: " << worst_prefix
            << "; over windows of ceil(1/share_min): " << worst_window.off << " (below floor by " << worst_window.below
            << ", above ceil by " << worst_window.above << ")\n";
}

TEST(MixtureSchedule, SmoothWindowsOfSimpleSetsHoldTheirShareWithinOne) {
  for (const std::vector<double>& weights : std::vector<std::vector<double>>{
           {0.7, 0.3}, {0.5, 0.3, 0.2}, {0.6, 0.3, 0.1}, {0.5, 0.25, 0.25}, {0.9, 0.05, 0.05}}) {
    SCOPED_TRACE(show(weights));
    const MixtureSchedule schedule(weights, Mode::kSmooth);
    const uint64_t window = shortest_window(schedule);
    EXPECT_LE(window_errors(schedule, window, 50 * window).off, 1.0) << "window " << window;
  }
}

TEST(MixtureSchedule, SmoothOrderOfSimpleSets) {
  const auto order = [](const std::vector<double>& weights, uint64_t length) {
    const MixtureSchedule schedule(weights, Mode::kSmooth);
    std::string text;
    for (uint64_t p = 0; p < length; ++p) text += static_cast<char>('0' + schedule.at(p).source);
    return text;
  };
  EXPECT_EQ(order({2, 1}, 9), "010010010");
  EXPECT_EQ(order({0.7, 0.3}, 20), "01000100100100010010");
  EXPECT_EQ(order({0.5, 0.25, 0.25}, 8), "01200120");
  EXPECT_EQ(order({0.5, 0.3, 0.2}, 10), "0120010210");
}

TEST(MixtureSchedule, SmoothNeverPicksAZeroWeight) {
  for (const Mode mode : {Mode::kSmooth, Mode::kMegatron}) {
    const MixtureSchedule schedule({0, 0.5, 0, 0.25, 0.25, 0}, mode);
    for (uint64_t p = 0; p < 5000; ++p) {
      const size_t source = schedule.at(p).source;
      ASSERT_TRUE(source == 1 || source == 3 || source == 4) << "position " << p << " took " << source;
    }
    const std::vector<uint64_t> counts = schedule.counts(5000);
    EXPECT_EQ(counts[0] + counts[2] + counts[5], 0u);
  }
}

TEST(MixtureSchedule, SmoothPositionsNearTheTopOfTheRangeDoNotOverflow) {
  for (const std::vector<double>& weights :
       std::vector<std::vector<double>>{{0.7, 0.3}, {std::numbers::pi, std::numbers::e, 1}, {1e-4, 1}}) {
    SCOPED_TRACE(show(weights));
    const MixtureSchedule schedule(weights, Mode::kSmooth);
    const uint64_t top = std::numeric_limits<uint64_t>::max();
    for (const uint64_t start : {(uint64_t{1} << 63) - 5, (uint64_t{1} << 63) + 12345, top - 10}) {
      std::vector<uint64_t> counts = schedule.counts(start);
      for (uint64_t p = start; p < start + 10; ++p) {
        ASSERT_EQ(std::accumulate(counts.begin(), counts.end(), uint64_t{0}), p);
        const MixtureSchedule::Pick pick = schedule.at(p);
        ASSERT_EQ(pick.before, counts[pick.source]) << "position " << p;
        // Each count is share * p to within the cumulative bound (relative to p, ~1e-19 here).
        for (size_t k = 0; k < counts.size(); ++k) {
          const long double expected = static_cast<long double>(schedule.shares()[k]) * static_cast<long double>(p);
          ASSERT_LT(std::fabs(static_cast<long double>(counts[k]) - expected) / static_cast<long double>(p), 1e-12L);
        }
        ++counts[pick.source];
      }
      ASSERT_EQ(schedule.counts(start + 10), counts);
    }
  }
}

TEST(MixtureSchedule, RejectsBadWeightsNamingThem) {
  for (const Mode mode : {Mode::kSmooth, Mode::kMegatron}) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    EXPECT_TRUE(testing::error_names(
        [&] {
          MixtureSchedule({0.5, 1, -0.5}, mode);
        },
        "mixture weight 2 is -0.5: weights must be >= 0"));
    EXPECT_TRUE(testing::error_names([&] { MixtureSchedule({nan, 1}, mode); }, "mixture weight 0 is nan"));
    EXPECT_TRUE(testing::error_names([&] { MixtureSchedule({1, inf}, mode); }, "mixture weight 1 is inf"));
    EXPECT_TRUE(testing::error_names([&] { MixtureSchedule({1, 2, 3, -inf}, mode); }, "mixture weight 3 is -inf"));
    EXPECT_TRUE(testing::error_names([&] { MixtureSchedule({0, 0, 0}, mode); }, "all 0"));
    EXPECT_TRUE(testing::error_names([&] { MixtureSchedule({}, mode); }, "empty"));
  }
}

TEST(MixtureSchedule, DescribesItselfWithTheWeightsAsGiven) {
  EXPECT_EQ(MixtureSchedule({0.7, 0.3}, Mode::kSmooth).describe(), "smooth(0.7, 0.3)");
  EXPECT_EQ(MixtureSchedule({2, 1, 0}, Mode::kMegatron).describe(), "megatron(2, 1, 0)");
  const MixtureSchedule schedule({2, 1, 1}, Mode::kSmooth);
  EXPECT_EQ(schedule.sources(), 3u);
  EXPECT_EQ(schedule.mode(), Mode::kSmooth);
  EXPECT_EQ(schedule.shares(), (std::vector<double>{0.5, 0.25, 0.25}));
}

}  // namespace
}  // namespace ferry
