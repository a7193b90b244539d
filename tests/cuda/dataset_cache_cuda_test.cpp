// The dataset cache on a GPU (the kinds and formats are covered by
// tests/integration/dataset_cache_test.cpp, which also runs device and managed memory where there is a
// GPU): cache_to(-1) and back keeps values and pointers, and the managed range's preferred location
// and last prefetch follow it, read back with cudaMemRangeGetAttribute.
#include <cstring>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/build_config.h>
#include <ferry/io/formats/synthetic_source.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/segment_copy.h>
#include <ferry/pipeline/unified_memory.h>
#include <ferry/stages/standard_pipeline.h>
#include <ferry/stages/standard_stages.h>
#include "tests/support/error_text.h"
#include "tests/support/reference_batch.h"

namespace ferry {
namespace {

class DatasetCacheCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
    if (const std::string why = segment_kernel_reason(); !why.empty()) GTEST_SKIP() << why;
    if (const UnifiedMemorySupport support = unified_memory_support(0); !support.supported)
      GTEST_SKIP() << support.reason;
  }
};

SyntheticOptions fields(uint64_t samples) {
  SyntheticOptions options;
  options.seed = 4;
  options.samples = samples;
  options.fields = {
      SyntheticField{"x", at::kFloat, {16, 9}, false, 0, 0, std::nullopt},
      SyntheticField{"ids", at::kInt, {}, true, 1, 70, std::nullopt},
  };
  return options;
}

TEST_F(DatasetCacheCuda, CacheToTheHostAndBackKeepsValuesAndPointers) {
  auto truth = std::make_shared<const SyntheticSource>(fields(300));
  PipelineOptions options;
  options.device = "cuda:0";
  options.batch_size = 20;
  options.epochs = 4;
  options.cache.memory = CacheMemory::kManaged;
  StageSet stages = make_standard_stages(truth, options);
  const std::shared_ptr<DatasetCache> cache = stages.cache;
  ASSERT_TRUE(cache);
  const std::byte* arena = cache->data();
  Pipeline pipeline = pipeline_from_stages(std::move(stages), options);

  auto take_epoch = [&](uint64_t epoch) {
    for (int b = 0; b < 15; ++b) {
      const std::optional<Batch> batch = pipeline.next();
      ASSERT_TRUE(batch);
      ASSERT_EQ(batch->epoch(), epoch);
      ASSERT_EQ(testing::compare_with_reference(*batch, *truth), "") << "epoch " << epoch << " batch " << b;
    }
  };
  take_epoch(0);
  take_epoch(1);
  const size_t used = pipeline.stats().cache.used_bytes;
  ASSERT_GT(used, 0u);
  ManagedRangeAttributes on_device = managed_range_attributes(arena, used);
  EXPECT_EQ(on_device.preferred_location, 0);
  EXPECT_EQ(on_device.accessed_by, std::vector<int>{0});

  pipeline.cache_to(-1);
  EXPECT_EQ(cache->data(), arena);
  EXPECT_EQ(pipeline.stats().cache.location, "host");
  ManagedRangeAttributes on_host = managed_range_attributes(arena, used);
  EXPECT_EQ(on_host.preferred_location, kCpuDevice);
  EXPECT_EQ(on_host.last_prefetch_location, kCpuDevice);
  take_epoch(2);  // gathered over the link from the host

  pipeline.cache_to(0);
  EXPECT_EQ(cache->data(), arena);
  EXPECT_EQ(pipeline.stats().cache.location, "cuda:0");
  ManagedRangeAttributes back = managed_range_attributes(arena, used);
  EXPECT_EQ(back.preferred_location, 0);
  EXPECT_EQ(back.last_prefetch_location, 0);
  take_epoch(3);
  EXPECT_FALSE(pipeline.next());

  const DatasetCacheStats stats = pipeline.stats().cache;
  EXPECT_EQ(stats.moves, 2u);
  EXPECT_GE(stats.hit_epochs, 2u);
  EXPECT_GT(stats.timed_gathers, 0u);
  EXPECT_GT(stats.gather_seconds, 0.0);
  EXPECT_THROW(pipeline.cache_to(1), Error);  // another device than the cache's
}

TEST_F(DatasetCacheCuda, ACacheLargerThanTheDeviceIsRefusedBeforeTheStart) {
  // 2^31 samples of 16 KiB: 32 TiB, more than any GPU has.
  SyntheticOptions huge = fields(uint64_t{1} << 31);
  huge.fields = {SyntheticField{"x", at::kByte, {16384}, false, 0, 0, std::nullopt}};
  PipelineOptions options;
  options.device = "cuda:0";
  for (const CacheMemory memory : {CacheMemory::kManaged, CacheMemory::kDevice}) {
    options.cache.memory = memory;
    const std::string what =
        testing::error_of([&] { (void)make_pipeline(std::make_shared<const SyntheticSource>(huge), options); });
    EXPECT_TRUE(testing::contains(what, "the cache needs 32 TiB")) << what;
    EXPECT_TRUE(testing::contains(what, "GiB free")) << what;
    EXPECT_TRUE(testing::contains(what, "set cache.max_bytes lower")) << what;
  }
}

}  // namespace
}  // namespace ferry
