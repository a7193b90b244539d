#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/pipeline/error.h>
#include <ferry/pipeline/sample_placer.h>

namespace ferry {
namespace {

std::shared_ptr<PinnedPool> pool_of(size_t bytes, size_t count = 1) {
  PinnedPoolOptions options;
  options.slab_bytes = bytes;
  options.slab_count = count;
  options.pinned = false;
  return PinnedPool::create(options);
}

std::shared_ptr<BatchPlan> plan_of(size_t samples) {
  auto plan = std::make_shared<BatchPlan>();
  for (size_t i = 0; i < samples; ++i) plan->sample_indices.push_back(100 + i);
  return plan;
}

// Note [placing samples]: each field's slots follow the one before it at the field's alignment, sample p
// of the plan at offset + p slots.
TEST(SamplePlacer, LaysTheSlotsOutFieldAfterFieldAtTheirAlignment) {
  const SamplePlacer placer({{6, 16}, {8, 8}, {3, 64}}, pool_of(1024), 0, 1 << 20);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> waited{0};
  const std::shared_ptr<PlacedSlab> slab = placer.reserve(5, stop, waited);
  ASSERT_NE(slab, nullptr);
  ASSERT_TRUE(slab->lease);
  EXPECT_EQ(slab->data, slab->lease.data());
  EXPECT_EQ(slab->samples, 5u);
  ASSERT_EQ(slab->fields.size(), 3u);
  EXPECT_EQ(slab->fields[0].offset, 0u);   // 5 x 6 = 30 bytes
  EXPECT_EQ(slab->fields[1].offset, 32u);  // 30 rounded up to 8; 5 x 8 = 40 bytes
  EXPECT_EQ(slab->fields[2].offset, 128u);  // 72 rounded up to 64
  EXPECT_EQ(slab->fields[2].sample_bytes, 3u);
}

TEST(SamplePlacer, CopiesEachFieldIntoItsSlotAndDropsTheTensor) {
  const SamplePlacer placer({{12, 16}, {8, 8}}, pool_of(4096), 0, 1 << 20);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> waited{0};
  const auto plan = plan_of(3);
  const std::shared_ptr<PlacedSlab> slab = placer.reserve(3, stop, waited);
  ASSERT_NE(slab, nullptr);
  std::vector<at::Tensor> kept;
  for (uint32_t p = 0; p < 3; ++p) {
    SampleWork sample;
    sample.plan = plan;
    sample.position = p;
    sample.slab = slab.get();
    sample.fields = {at::arange(3, at::kFloat) + static_cast<double>(10 * p),
                     at::full({}, static_cast<int64_t>(7 * p), at::kLong)};
    kept.push_back(sample.fields[0].clone());
    kept.push_back(sample.fields[1].clone());
    EXPECT_EQ(placer.place(sample), 20u);
    EXPECT_EQ(sample.placed, 0b11u);
    EXPECT_TRUE(sample.is_placed(0) && sample.is_placed(1));
    EXPECT_FALSE(sample.fields[0].defined()) << "a placed field's tensor is freed on the thread that placed it";
    EXPECT_FALSE(sample.fields[1].defined());
  }
  for (size_t p = 0; p < 3; ++p) {
    EXPECT_EQ(std::memcmp(slab->data + slab->fields[0].offset + p * 12, kept[2 * p].data_ptr(), 12), 0) << p;
    EXPECT_EQ(std::memcmp(slab->data + slab->fields[1].offset + p * 8, kept[2 * p + 1].data_ptr(), 8), 0) << p;
  }
}

// Left for pack, which copies them as before: a strided tensor, one of another size, one on no device yet
// (pending for the GPU's decoder), and what is past the sample's budget; the fields after them are placed.
TEST(SamplePlacer, LeavesToPackWhatItCannotPlace) {
  const SamplePlacer placer({{16, 16}, {16, 16}, {8, 8}, {64, 16}, {4, 4}, {4, 4}}, pool_of(4096), 0, 32);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> waited{0};
  const auto plan = plan_of(1);
  const std::shared_ptr<PlacedSlab> slab = placer.reserve(1, stop, waited);
  ASSERT_NE(slab, nullptr);
  SampleWork sample;
  sample.plan = plan;
  sample.slab = slab.get();
  sample.fields = {
      at::arange(8, at::kFloat).view({2, 4}).t(),  // 16 bytes, but strided
      at::arange(4, at::kFloat),                   // 16 bytes: placed
      at::arange(3, at::kFloat),                   // 12 bytes where the slot holds 8
      at::arange(16, at::kFloat),                  // 64 bytes, past the 32 - 16 left of the budget
      at::Tensor(),                                // pending
      at::arange(1, at::kInt),                     // 4 bytes: placed
  };
  EXPECT_EQ(placer.place(sample), 20u);
  EXPECT_EQ(sample.placed, 0b100010u);
  for (size_t f : {0, 2, 3}) EXPECT_TRUE(sample.fields[f].defined()) << "field " << f << " stays for pack";
}

// A sample beyond the plan's slots (never in a pipeline) and one without a slab place nothing.
TEST(SamplePlacer, PlacesNothingWithoutASlot) {
  const SamplePlacer placer({{4, 4}}, pool_of(64), 0, 1 << 20);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> waited{0};
  const auto plan = plan_of(3);
  const std::shared_ptr<PlacedSlab> slab = placer.reserve(2, stop, waited);
  SampleWork sample;
  sample.plan = plan;
  sample.fields = {at::arange(1, at::kInt)};
  EXPECT_EQ(placer.place(sample), 0u);
  sample.slab = slab.get();
  sample.position = 2;
  EXPECT_EQ(placer.place(sample), 0u);
  EXPECT_EQ(sample.placed, 0u);
  EXPECT_TRUE(sample.fields[0].defined());
}

// A plan too large for a slab is not placed: pack reports it, with its message (and no slab is leased).
TEST(SamplePlacer, APlanLargerThanASlabIsNotPlaced) {
  auto pool = pool_of(100);
  const SamplePlacer placer({{10, 1}, {10, 16}}, pool, 0, 1 << 20);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> waited{0};
  EXPECT_NE(placer.reserve(4, stop, waited), nullptr);  // 40, then 48 + 40 = 88 bytes
  EXPECT_EQ(placer.reserve(5, stop, waited), nullptr);  // 50, then 64 + 50 = 114
  EXPECT_EQ(placer.reserve(SIZE_MAX / 4, stop, waited), nullptr) << "sizes that overflow are refused too";
  EXPECT_EQ(pool->stats().leased_bytes, 0u);
}

// Every slab is leased: reserve waits (counting the time), and gives up once stop turns true, as at
// shutdown; a slab returned meanwhile is taken.
TEST(SamplePlacer, WaitsForAFreeSlabAndGivesUpAtStop) {
  auto pool = pool_of(64);
  const SamplePlacer placer({{4, 4}}, pool, 0, 1 << 20);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> waited{0};
  std::shared_ptr<PlacedSlab> held = placer.reserve(2, stop, waited);
  ASSERT_NE(held, nullptr);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop.store(true);
  });
  EXPECT_EQ(placer.reserve(2, stop, waited), nullptr);
  stopper.join();
  EXPECT_GT(waited.load(), 0u);

  stop.store(false);
  std::thread returner([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    held.reset();
  });
  EXPECT_NE(placer.reserve(2, stop, waited), nullptr);
  returner.join();
}

TEST(SamplePlacer, RefusesNoFieldsNoPoolAndAZeroAlignment) {
  EXPECT_THROW(SamplePlacer({}, pool_of(64), 0, 1), Error);
  EXPECT_THROW(SamplePlacer({{4, 4}}, nullptr, 0, 1), Error);
  EXPECT_THROW(SamplePlacer({{4, 0}}, pool_of(64), 0, 1), Error);
}

}  // namespace
}  // namespace ferry
