#include <ferry/io/samplers/sharded_sampler.h>

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <ferry/io/samplers/sequential_sampler.h>
#include <ferry/io/samplers/shuffled_sampler.h>
#include <ferry/pipeline/error.h>
#include "tests/support/error_text.h"

namespace ferry {
namespace {

using Remainder = ShardedSampler::Remainder;

constexpr uint64_t kTestSeed = 31337;

std::vector<uint64_t> sizes_to_test(std::mt19937_64& rng) {
  std::vector<uint64_t> sizes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 16, 17, 23, 24, 25, 64, 100, 101};
  std::uniform_int_distribution<uint64_t> any(0, 3000);
  for (int i = 0; i < 30; ++i) sizes.push_back(any(rng));
  return sizes;
}

std::vector<std::shared_ptr<const Sampler>> inners(uint64_t n, uint64_t seed) {
  return {std::make_shared<SequentialSampler>(n), std::make_shared<ShuffledSampler>(n, seed)};
}

// What every rank visits in `epoch`, by rank.
std::vector<std::vector<uint64_t>> shards(const std::shared_ptr<const Sampler>& inner, uint64_t world_size,
                                          Remainder remainder, uint64_t epoch) {
  std::vector<std::vector<uint64_t>> result;
  for (uint64_t rank = 0; rank < world_size; ++rank) {
    const ShardedSampler sampler(inner, rank, world_size, remainder);
    std::vector<uint64_t> visited;
    for (uint64_t p = 0; p < sampler.epoch_size(); ++p) visited.push_back(sampler.index(epoch, p));
    result.push_back(std::move(visited));
  }
  return result;
}

TEST(ShardedSampler, DropGivesEqualDisjointShardsOfFloorNOverW) {
  std::mt19937_64 rng(kTestSeed);
  for (const uint64_t n : sizes_to_test(rng)) {
    const uint64_t seed = rng();
    for (uint64_t w = 1; w <= 8; ++w) {
      for (const auto& inner : inners(n, seed)) {
        SCOPED_TRACE("test seed " + std::to_string(kTestSeed) + ", n=" + std::to_string(n) +
                     ", world_size=" + std::to_string(w) + ", inner " + inner->describe());
        const uint64_t epoch = rng() % 5;
        const auto by_rank = shards(inner, w, Remainder::kDrop, epoch);
        std::map<uint64_t, uint64_t> count;
        for (uint64_t r = 0; r < w; ++r) {
          ASSERT_EQ(by_rank[r].size(), n / w) << "rank " << r;
          for (uint64_t p = 0; p < by_rank[r].size(); ++p) {
            // Rank r takes global positions r, r + W, ... of the inner epoch.
            ASSERT_EQ(by_rank[r][p], inner->index(epoch, p * w + r)) << "rank " << r << " position " << p;
            ++count[by_rank[r][p]];
          }
        }
        EXPECT_EQ(count.size(), n / w * w);
        for (const auto& [sample, times] : count) {
          ASSERT_LT(sample, n);
          ASSERT_EQ(times, 1u) << "sample " << sample;
        }
      }
    }
  }
}

TEST(ShardedSampler, PadGivesEqualShardsCoveringEverySampleWithTheFirstOnesRepeated) {
  std::mt19937_64 rng(kTestSeed + 1);
  for (const uint64_t n : sizes_to_test(rng)) {
    const uint64_t seed = rng();
    for (uint64_t w = 1; w <= 8; ++w) {
      for (const auto& inner : inners(n, seed)) {
        SCOPED_TRACE("test seed " + std::to_string(kTestSeed + 1) + ", n=" + std::to_string(n) +
                     ", world_size=" + std::to_string(w) + ", inner " + inner->describe());
        const uint64_t epoch = rng() % 5;
        const uint64_t per_rank = (n + w - 1) / w;
        const auto by_rank = shards(inner, w, Remainder::kPad, epoch);
        std::map<uint64_t, uint64_t> count;
        for (uint64_t r = 0; r < w; ++r) {
          ASSERT_EQ(by_rank[r].size(), per_rank) << "rank " << r;
          for (uint64_t p = 0; p < per_rank; ++p) {
            const uint64_t global = p * w + r;
            // Past the end, the epoch wraps around to its start.
            ASSERT_EQ(by_rank[r][p], inner->index(epoch, global % n)) << "rank " << r << " position " << p;
            ++count[by_rank[r][p]];
          }
        }
        // Every sample at least once; the ceil(n/W)*W - n extra visits are the epoch's first samples
        // (in epoch order, wrapping again when W > n).
        EXPECT_EQ(count.size(), n);
        std::map<uint64_t, uint64_t> expected;
        for (uint64_t g = 0; g < per_rank * w; ++g) ++expected[inner->index(epoch, g % n)];
        EXPECT_EQ(count, expected);
        const uint64_t padding = per_rank * w - n;
        EXPECT_LT(padding, w);
        if (padding <= n) {
          for (uint64_t k = 0; k < n; ++k) {
            const uint64_t sample = inner->index(epoch, k);
            ASSERT_EQ(count[sample], k < padding ? 2u : 1u) << "epoch position " << k;
          }
        }
      }
    }
  }
}

TEST(ShardedSampler, AllRanksHaveTheSameEpochSize) {
  for (uint64_t n : {0, 1, 2, 5, 7, 8, 9, 1000, 1001}) {
    for (uint64_t w = 1; w <= 8; ++w) {
      for (const Remainder remainder : {Remainder::kPad, Remainder::kDrop}) {
        const auto inner = std::make_shared<SequentialSampler>(n);
        const uint64_t expected = remainder == Remainder::kPad ? (n + w - 1) / w : n / w;
        for (uint64_t r = 0; r < w; ++r) {
          EXPECT_EQ(ShardedSampler(inner, r, w, remainder).epoch_size(), expected)
              << "n=" << n << " world_size=" << w << " rank=" << r;
        }
      }
    }
  }
}

TEST(ShardedSampler, FollowsTheInnerSamplersEpochs) {
  const auto inner = std::make_shared<ShuffledSampler>(1000, 4);
  const ShardedSampler sampler(inner, 2, 3, Remainder::kPad);
  std::vector<uint64_t> e0, e1;
  for (uint64_t p = 0; p < sampler.epoch_size(); ++p) {
    e0.push_back(sampler.index(0, p));
    e1.push_back(sampler.index(1, p));
  }
  EXPECT_NE(e0, e1);
}

TEST(ShardedSampler, HugeInnerEpochsDoNotOverflow) {
  // n = 2^64 - 1 and W = 7: n % 7 == 1, so the last global positions are n - 1 + rank, which passes
  // 2^64 if computed as position * W + rank. They must wrap to the epoch's start instead.
  const uint64_t n = ~uint64_t{0};
  const auto inner = std::make_shared<SequentialSampler>(n);
  for (const uint64_t w : {7u, 8u}) {
    const uint64_t rem = n % w;
    for (uint64_t r = 0; r < w; ++r) {
      const ShardedSampler sampler(inner, r, w, Remainder::kPad);
      ASSERT_EQ(sampler.epoch_size(), n / w + 1);
      const uint64_t expected = r < rem ? n - rem + r : r - rem;
      EXPECT_EQ(sampler.index(0, sampler.epoch_size() - 1), expected) << "world_size " << w << " rank " << r;
      EXPECT_EQ(sampler.index(0, 0), r);
    }
  }
}

TEST(ShardedSampler, PositionOutsideTheShardThrows) {
  const auto inner = std::make_shared<SequentialSampler>(10);
  const ShardedSampler pad(inner, 3, 4, Remainder::kPad);
  EXPECT_NO_THROW(pad.index(0, 2));
  EXPECT_THROW(pad.index(0, 3), Error);
  const ShardedSampler drop(inner, 3, 4, Remainder::kDrop);
  EXPECT_NO_THROW(drop.index(0, 1));
  EXPECT_THROW(drop.index(0, 2), Error);
  const ShardedSampler empty(std::make_shared<SequentialSampler>(0), 0, 2, Remainder::kPad);
  EXPECT_EQ(empty.epoch_size(), 0u);
  EXPECT_THROW(empty.index(0, 0), Error);
}

TEST(ShardedSampler, RejectsBadArgumentsNamingThem) {
  const auto inner = std::make_shared<SequentialSampler>(10);
  EXPECT_TRUE(testing::error_names([&] { ShardedSampler(inner, 0, 0, Remainder::kPad); }, "world_size"));
  EXPECT_TRUE(testing::error_names([&] { ShardedSampler(inner, 4, 4, Remainder::kDrop); }, "rank 4"));
  EXPECT_TRUE(testing::error_names([&] { ShardedSampler(inner, 9, 2, Remainder::kPad); }, "rank 9"));
  EXPECT_TRUE(testing::error_names([&] { ShardedSampler(nullptr, 0, 1, Remainder::kPad); }, "inner"));
}

// W ranks took the first p x W positions; W' ranks resumed at the positions that leave each of them
// its share of the rest take, together, every remaining position once (pad: and the first ones again
// to even the last round), and epochs after it as without a resume point.
TEST(ShardedSampler, AResumePointDealsTheRestOfTheEpochToOtherRanksExactlyOnce) {
  std::mt19937_64 rng(kTestSeed);
  for (const uint64_t n : {1, 2, 7, 10, 97, 256}) {
    for (const uint64_t world : {1, 2, 3, 4}) {
      for (const uint64_t new_world : {1, 2, 3, 5, 8}) {
        for (const Remainder remainder : {Remainder::kPad, Remainder::kDrop}) {
          const auto inner = std::make_shared<ShuffledSampler>(n, rng());
          const ShardedSampler saved(inner, 0, world, remainder);
          for (uint64_t p = 0; p < saved.epoch_size(); ++p) {
            const uint64_t consumed = saved.consumed_before(0, p);
            if (consumed >= n) continue;
            SCOPED_TRACE("n=" + std::to_string(n) + " W=" + std::to_string(world) + " W'=" + std::to_string(new_world) +
                         " p=" + std::to_string(p));
            std::map<uint64_t, int> seen;
            for (uint64_t global = 0; global < consumed; ++global) ++seen[inner->index(0, global)];
            const uint64_t left = n - consumed;
            const uint64_t mine = remainder == Remainder::kPad ? (left + new_world - 1) / new_world : left / new_world;
            for (uint64_t rank = 0; rank < new_world; ++rank) {
              const ShardedSampler plain(inner, rank, new_world, remainder);
              const uint64_t start = plain.epoch_size() - mine;
              const ShardedSampler resumed(inner, rank, new_world, remainder,
                                           ShardedSampler::Resume{0, consumed, start});
              for (uint64_t q = start; q < resumed.epoch_size(); ++q) ++seen[resumed.index(0, q)];
              EXPECT_EQ(resumed.consumed_before(0, resumed.epoch_size()), std::min(n, consumed + mine * new_world));
              for (uint64_t q = 0; q < resumed.epoch_size(); ++q) EXPECT_EQ(resumed.index(1, q), plain.index(1, q));
            }
            const uint64_t missing = remainder == Remainder::kDrop ? left % new_world : 0;
            EXPECT_EQ(seen.size(), n - missing);
            uint64_t twice = 0;  // deliveries past the first
            for (const auto& entry : seen) twice += entry.second - 1;
            EXPECT_EQ(twice, remainder == Remainder::kPad ? mine * new_world - left : 0);
          }
        }
      }
    }
  }
}

// Under drop_last a resumed rank plans only the whole batches of the rest, but a skipped sample's
// replacement may read any position of the epoch: each is a sample, wrapping past the epoch's end.
TEST(ShardedSampler, EveryPositionOfAResumedEpochIsASample) {
  const auto inner = std::make_shared<ShuffledSampler>(97, 3);
  for (const Remainder remainder : {Remainder::kPad, Remainder::kDrop}) {
    for (uint64_t rank = 0; rank < 4; ++rank) {
      const ShardedSampler resumed(inner, rank, 4, remainder, ShardedSampler::Resume{0, 20, 4});
      for (uint64_t q = 0; q < resumed.epoch_size(); ++q) EXPECT_LT(resumed.index(0, q), 97u) << q;
    }
  }
}

TEST(ShardedSampler, AResumePointOnTheSameRanksIsTheSamplersOwnOrder) {
  const auto inner = std::make_shared<ShuffledSampler>(101, 7);
  for (const Remainder remainder : {Remainder::kPad, Remainder::kDrop}) {
    for (uint64_t rank = 0; rank < 4; ++rank) {
      const ShardedSampler plain(inner, rank, 4, remainder);
      for (uint64_t p = 0; p < plain.epoch_size(); ++p) {
        const ShardedSampler resumed(inner, rank, 4, remainder, ShardedSampler::Resume{0, p * 4, p});
        for (uint64_t q = p; q < plain.epoch_size(); ++q) ASSERT_EQ(resumed.index(0, q), plain.index(0, q));
      }
    }
  }
  EXPECT_TRUE(testing::error_names(
      [&] {
        ShardedSampler(inner, 0, 2, Remainder::kPad, ShardedSampler::Resume{0, 101, 0});
      },
      "resume point"));
}

TEST(ShardedSampler, DescribesRankRemainderAndInner) {
  const auto inner = std::make_shared<ShuffledSampler>(10, 3);
  EXPECT_EQ(ShardedSampler(inner, 1, 4, Remainder::kPad).describe(),
            "sharded(rank=1/4, pad, shuffled(size=10, seed=3))");
  EXPECT_EQ(ShardedSampler(inner, 0, 2, Remainder::kDrop).describe(),
            "sharded(rank=0/2, drop, shuffled(size=10, seed=3))");
  EXPECT_EQ(ShardedSampler(inner, 0, 2, Remainder::kDrop, ShardedSampler::Resume{1, 4, 3}).describe(),
            "sharded(rank=0/2, drop, resumed at epoch 1 after 4, shuffled(size=10, seed=3))");
}

}  // namespace
}  // namespace ferry
