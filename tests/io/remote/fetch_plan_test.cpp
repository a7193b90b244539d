// The shard cache's plan: a cache that starts the fetches the plan says before each read, and fetches
// what is still missing when it is read, fetches as often as Belady's rule plus what the plans said they
// spent of the spare (at most 4%), for any order — in order, shuffled by shard, drawn at random — never
// drops what it is fetching, and read in order with half the room, few reads wait.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/io/remote/fetch_plan.h>

namespace ferry {
namespace {

std::string key(uint32_t id) { return "extent-" + std::to_string(id); }

// Belady's rule for one reader: the fewest fetches a cache of `slots` extents can do for `order`.
size_t fewest_fetches(const std::vector<uint32_t>& order, size_t slots) {
  std::vector<uint32_t> held;
  size_t fetches = 0;
  for (size_t t = 0; t < order.size(); ++t) {
    if (std::find(held.begin(), held.end(), order[t]) != held.end()) continue;
    ++fetches;
    if (held.size() == slots) {
      auto next = [&](uint32_t id) {
        const auto found = std::find(order.begin() + static_cast<ptrdiff_t>(t), order.end(), id);
        return static_cast<size_t>(found - order.begin());
      };
      held.erase(std::max_element(held.begin(), held.end(), [&](uint32_t a, uint32_t b) { return next(a) < next(b); }));
    }
    held.push_back(order[t]);
  }
  return fetches;
}

struct Outcome {
  size_t fetches = 0;
  size_t waits = 0;  // reads that found their extent missing, or still on its way
  size_t spent = 0;  // fetches spent beyond the fewest, as the plans counted them
};

// Reads `order` through a cache of `slots` extents of one byte each. Before each read it starts the
// fetches plan_fetches() says, which arrive `latency` reads later; a read whose extent is missing fetches
// it then, dropping by Belady's rule.
Outcome read_with_plan(const std::vector<uint32_t>& order, size_t slots, size_t ahead, size_t latency = 2) {
  std::vector<HeldExtent> held;  // pinned: on its way
  std::map<uint32_t, size_t> arrives;
  Outcome outcome;
  const auto find = [&](uint32_t id) {
    return std::find_if(held.begin(), held.end(), [&](const HeldExtent& e) { return e.id == id; });
  };
  for (size_t t = 0; t < order.size(); ++t) {
    for (HeldExtent& extent : held) extent.pinned = extent.pinned && arrives[*extent.id] > t;
    ReadsAhead reads;
    for (size_t s = t; s < order.size(); ++s) reads.add(order[s], s - t, s - t);
    reads.finish();
    const uint64_t spare = spare_fetches(outcome.fetches, outcome.spent);
    for (const PlannedFetch& fetch : plan_fetches(
             reads, held, slots, ahead, [](uint32_t) { return 1; }, spare)) {
      outcome.spent += fetch.extra;
      for (const HeldExtent& drop : fetch.drops) {
        const auto found =
            std::find_if(held.begin(), held.end(), [&](const HeldExtent& e) { return e.key == drop.key; });
        if (found == held.end() || found->pinned) {
          ADD_FAILURE() << "at read " << t << " the plan drops " << drop.key << ", which the cache "
                        << (found == held.end() ? "does not hold" : "is fetching");
          return outcome;
        }
        held.erase(found);
      }
      held.push_back(HeldExtent{key(fetch.id), fetch.id, 1, t, true});
      arrives[fetch.id] = t + latency;
      ++outcome.fetches;
    }
    EXPECT_LE(held.size(), slots) << "at read " << t;
    auto present = find(order[t]);
    if (present == held.end()) {
      ++outcome.waits;
      ++outcome.fetches;
      if (held.size() == slots) {
        const auto furthest = std::max_element(held.begin(), held.end(), [&](const HeldExtent& a, const HeldExtent& b) {
          if (a.pinned != b.pinned) return a.pinned;
          const uint64_t na = reads.next_read(*a.id, 0), nb = reads.next_read(*b.id, 0);
          return na != nb ? na < nb : a.recency > b.recency;
        });
        EXPECT_FALSE(furthest->pinned) << "at read " << t << ": every extent is on its way";
        held.erase(furthest);
      }
      held.push_back(HeldExtent{key(order[t]), order[t], 1, t, false});
      present = held.end() - 1;
    } else if (present->pinned) {
      ++outcome.waits;  // on its way: arrives now
      present->pinned = false;
    }
    present->recency = t + 1;
  }
  return outcome;
}

// `extents` extents over `epochs` epochs, each read `steps` times in a row, in order or shuffled.
std::vector<uint32_t> by_extent(size_t extents, size_t epochs, size_t steps, bool shuffle, std::mt19937& random) {
  std::vector<uint32_t> order;
  for (size_t epoch = 0; epoch < epochs; ++epoch) {
    std::vector<uint32_t> ids(extents);
    for (uint32_t i = 0; i < extents; ++i) ids[i] = i;
    if (shuffle) std::shuffle(ids.begin(), ids.end(), random);
    for (const uint32_t id : ids) order.insert(order.end(), steps, id);
  }
  return order;
}

// What a run costs beyond Belady's rule is what its plans said they spent, within the spare.
void expect_within_spare(const Outcome& outcome, const std::vector<uint32_t>& order, size_t slots,
                         const std::string& what) {
  const size_t fewest = fewest_fetches(order, slots);
  EXPECT_LE(outcome.fetches, fewest + outcome.spent) << what;
  EXPECT_LE(outcome.spent, outcome.fetches / kFetchesPerSpare) << what;
  EXPECT_LE(static_cast<double>(outcome.fetches), 1.05 * static_cast<double>(fewest)) << what;
}

TEST(FetchPlan, ReadInOrderWithHalfTheRoomFewReadsWait) {
  std::mt19937 random(1);
  for (const size_t ahead : {1, 2, 8}) {
    const std::vector<uint32_t> order = by_extent(100, 3, 5, false, random);
    const Outcome outcome = read_with_plan(order, 50, ahead);
    expect_within_spare(outcome, order, 50, std::to_string(ahead) + " ahead");
    // Belady's rule alone keeps one slot turning over: every extent fetched after the first epoch's
    // first half would make the reading wait.
    EXPECT_LT(outcome.waits, 300u / 10) << ahead << " ahead";
  }
}

TEST(FetchPlan, SmallCachesFetchAsFewAsBeladyWithinTheSpare) {
  std::mt19937 random(2);
  for (int round = 0; round < 80; ++round) {
    const size_t extents = 3 + random() % 10;
    std::vector<uint32_t> order;
    if (round % 3 == 0) {
      order = by_extent(extents, 1 + random() % 3, 1 + random() % 4, round % 2 == 0, random);
    } else {
      for (size_t i = 0; i < 60; ++i) order.push_back(static_cast<uint32_t>(random() % extents));
    }
    const size_t slots = 1 + random() % extents;
    const size_t ahead = 1 + random() % 8;
    const Outcome outcome = read_with_plan(order, slots, ahead);
    expect_within_spare(outcome, order, slots,
                        "round " + std::to_string(round) + ": " + std::to_string(extents) + " extents, " +
                            std::to_string(slots) + " slots, " + std::to_string(ahead) + " ahead");
  }
}

TEST(FetchPlan, WithRoomForEverythingFetchesEachExtentOnceAndAhead) {
  std::mt19937 random(3);
  const std::vector<uint32_t> order = by_extent(10, 2, 3, true, random);
  const Outcome outcome = read_with_plan(order, 10, 4);
  EXPECT_EQ(outcome.fetches, 10u);
  EXPECT_EQ(outcome.waits, 1u);
  // Unbounded (capacity 0) likewise; and only the extent read now and the next `ahead` are fetched.
  ReadsAhead reads;
  for (size_t s = 0; s < order.size(); ++s) reads.add(order[s], s, s);
  reads.finish();
  EXPECT_EQ(plan_fetches(reads, {}, 0, 4, [](uint32_t) { return 1; }).size(), 5u);
}

TEST(FetchPlan, NeverDropsAnExtentBeingFetched) {
  ReadsAhead reads;
  for (uint32_t id = 0; id < 4; ++id) reads.add(id, id, id);
  reads.finish();
  // A cache of one extent, which extent 9 (read by nobody) fills. Being fetched, it cannot be dropped, so
  // nothing can start; fetched, it is dropped for extent 0.
  const std::vector<HeldExtent> held{HeldExtent{"extent-9", 9, 1, 0, true}};
  EXPECT_TRUE(plan_fetches(reads, held, 1, 4, [](uint32_t) { return 1; }).empty());
  const std::vector<HeldExtent> unpinned{HeldExtent{"extent-9", 9, 1, 0, false}};
  const auto plan = plan_fetches(reads, unpinned, 1, 4, [](uint32_t) { return 1; });
  ASSERT_FALSE(plan.empty());
  EXPECT_EQ(plan[0].id, 0u);
  ASSERT_EQ(plan[0].drops.size(), 1u);
  EXPECT_EQ(plan[0].drops[0].key, "extent-9");
}

}  // namespace
}  // namespace ferry
