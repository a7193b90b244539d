#include <ferry/pipeline/pinned_pool.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/error.h>
#include <ferry/stages/pipeline_options.h>

namespace ferry {
namespace {

using namespace std::chrono_literals;

PinnedPoolOptions small(size_t slabs, size_t bytes = 10000) {
  PinnedPoolOptions options;
  options.slab_bytes = bytes;
  options.slab_count = slabs;
  return options;
}

TEST(PinnedPool, FallsBackToPageAlignedPageableMemoryWithoutADevice) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: the fallback is not taken";
  auto pool = PinnedPool::create(small(2));
  EXPECT_FALSE(pool->pinned());
  EXPECT_EQ(pool->stats().host_alloc_calls, 0u);
  auto lease = pool->try_acquire();
  ASSERT_TRUE(lease);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(lease->data()) % 4096, 0u);
}

TEST(PinnedPool, LeasesDistinctPageAlignedNonOverlappingSlabs) {
  auto pool = PinnedPool::create(small(4, 5000));
  std::vector<PinnedLease> leases;
  for (int i = 0; i < 4; ++i) {
    auto lease = pool->try_acquire();
    ASSERT_TRUE(lease);
    EXPECT_EQ(lease->size(), 5000u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(lease->data()) % 4096, 0u);
    std::memset(lease->data(), i + 1, lease->size());  // every byte is writable
    leases.push_back(std::move(*lease));
  }
  std::set<size_t> slabs;
  for (const auto& lease : leases) slabs.insert(lease.slab());
  EXPECT_EQ(slabs.size(), 4u);
  for (size_t i = 0; i < leases.size(); ++i) {
    for (size_t b = 0; b < leases[i].size(); b += 999) {
      ASSERT_EQ(std::to_integer<int>(leases[i].data()[b]), static_cast<int>(i) + 1) << "slabs overlap";
    }
  }
  EXPECT_FALSE(pool->try_acquire());  // all out
  const PinnedPoolStats stats = pool->stats();
  EXPECT_EQ(stats.leases, 4u);
  EXPECT_EQ(stats.leased_bytes, 4u * 5000u);
  EXPECT_EQ(stats.peak_bytes, 4u * 5000u);
}

TEST(PinnedPool, ReleasedSlabIsLeasedAgain) {
  auto pool = PinnedPool::create(small(1));
  auto first = pool->try_acquire();
  ASSERT_TRUE(first);
  const std::byte* memory = first->data();
  EXPECT_FALSE(pool->try_acquire());
  first->release();
  EXPECT_FALSE(*first);
  auto second = pool->try_acquire();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->data(), memory);
  EXPECT_EQ(pool->stats().leased_bytes, pool->slab_bytes());
}

TEST(PinnedPool, AcquireWaitsForAReturnAndCountsTheWait) {
  auto pool = PinnedPool::create(small(1));
  auto held = pool->try_acquire();
  ASSERT_TRUE(held);
  EXPECT_FALSE(pool->acquire(20ms));  // times out
  auto waiter = std::async(std::launch::async, [&] { return pool->acquire(5s); });
  std::this_thread::sleep_for(30ms);
  held->release();
  auto lease = waiter.get();
  EXPECT_TRUE(lease);
  EXPECT_EQ(pool->stats().waits, 2u);
}

TEST(PinnedPool, MovedLeaseReturnsItsSlabOnce) {
  auto pool = PinnedPool::create(small(1));
  {
    auto lease = pool->try_acquire();
    ASSERT_TRUE(lease);
    PinnedLease moved = std::move(*lease);
    EXPECT_FALSE(*lease);
    EXPECT_TRUE(moved);
    PinnedLease assigned;
    assigned = std::move(moved);
    EXPECT_EQ(pool->stats().leased_bytes, pool->slab_bytes());
  }
  EXPECT_EQ(pool->stats().leased_bytes, 0u);
  EXPECT_TRUE(pool->try_acquire());
}

TEST(PinnedPool, LeaseKeepsThePoolAlive) {
  std::optional<PinnedLease> lease;
  {
    auto pool = PinnedPool::create(small(1));
    lease = pool->try_acquire();
  }
  ASSERT_TRUE(lease && *lease);
  std::memset(lease->data(), 0xab, lease->size());
  lease->release();
}

TEST(PinnedPool, RefusesSlabsOverTheBudget) {
  PinnedPoolOptions options = small(4, 1 << 20);
  options.budget_bytes = 3 << 20;
  try {
    PinnedPool::create(options);
    FAIL() << "expected a budget error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed the pinned budget"), std::string::npos) << e.what();
  }
  options.budget_bytes = 4 << 20;
  EXPECT_NO_THROW(PinnedPool::create(options));
  // The budget counts what is pinned: each slab rounded up to a page.
  PinnedPoolOptions odd = small(2, 5000);
  odd.budget_bytes = 10000;
  EXPECT_THROW(PinnedPool::create(odd), Error);
  odd.budget_bytes = 2 * 8192;
  EXPECT_NO_THROW(PinnedPool::create(odd));
}

TEST(PinnedPool, FootprintIsWhatThePoolPinsAndWhatABudgetMustHold) {
  EXPECT_EQ(PinnedPool::footprint(4096, 3), 3u * 4096);
  EXPECT_EQ(PinnedPool::footprint(5000, 2), 2u * 8192);
  EXPECT_EQ(PinnedPool::footprint(1, 1), 4096u);
  EXPECT_EQ(PinnedPool::footprint(SIZE_MAX, 1), std::nullopt);
  EXPECT_EQ(PinnedPool::footprint(SIZE_MAX / 4096, 8192), std::nullopt);
  // A budget of exactly the footprint is enough; a byte less is not.
  for (const size_t slab : {size_t{4096}, size_t{5000}, size_t{1} << 20}) {
    PinnedPoolOptions options = small(3, slab);
    options.budget_bytes = *PinnedPool::footprint(slab, 3);
    EXPECT_NO_THROW(PinnedPool::create(options)) << slab;
    options.budget_bytes -= 1;
    EXPECT_THROW(PinnedPool::create(options), Error) << slab;
  }
}

TEST(PoolOptions, SlabSizeIsTheSetSizeElseTheLargestBatchAtLeastAPage) {
  PoolOptions pool;
  EXPECT_EQ(pool.slab_size(std::nullopt), std::nullopt);
  EXPECT_EQ(pool.slab_size(100), PoolOptions::kMinSlabBytes);
  EXPECT_EQ(pool.slab_size(123456), 123456u);
  pool.slab_bytes = 1000;
  EXPECT_EQ(pool.slab_size(std::nullopt), 1000u);
  EXPECT_EQ(pool.slab_size(123456), 1000u);  // too small for the batch: check_config() says so
  EXPECT_EQ(pool.slabs(3), 3u);
  pool.slab_count = 7;
  EXPECT_EQ(pool.slabs(3), 7u);
}

TEST(PinnedPool, RejectsEmptyAndOverflowingConfigurations) {
  EXPECT_THROW(PinnedPool::create(small(0)), Error);
  EXPECT_THROW(PinnedPool::create(small(1, 0)), Error);
  EXPECT_THROW(PinnedPool::create(small(1, SIZE_MAX)), Error);
  EXPECT_THROW(PinnedPool::create(small(SIZE_MAX / 4096, 8192)), Error);
}

TEST(PinnedPool, PeakBytesNeverExceedsSlabsUnderConcurrentUse) {
  auto pool = PinnedPool::create(small(3, 4096));
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto lease = pool->acquire(5s);
        ASSERT_TRUE(lease);
        lease->data()[0] = std::byte{1};
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const PinnedPoolStats stats = pool->stats();
  EXPECT_EQ(stats.leases, 12000u);
  EXPECT_LE(stats.peak_bytes, 3u * 4096u);
  EXPECT_EQ(stats.leased_bytes, 0u);
}

}  // namespace
}  // namespace ferry
