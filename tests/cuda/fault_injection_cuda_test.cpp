// The GPU's faults (Note [fault injection]): a cudaMemcpyAsync, an event record or an event query
// that fails, at random moments and every thread count, in the pipeline and in start_copy. Each
// must surface as an error (never a hang: CTest's timeout), every batch before it is right byte for
// byte, and every slab comes back. Then 1000 pipelines on the GPU leave no device memory behind.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <optional>
#include <random>
#include <string>

#include <ferry/build_config.h>
#include <ferry/copy/async_copy_handle.h>
#include <ferry/copy/nested.h>
#include <ferry/copy/tensor_copy.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/fault_injection.h>
#include <ferry/pipeline/pinned_pool.h>
#include <ferry/stages/standard_pipeline.h>
#include <ferry/stages/standard_stages.h>
#include "tests/support/random_options.h"
#include "tests/support/reference_batch.h"

#if FERRY_WITH_GPU
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

#if FERRY_WITH_GPU

class FaultInjectionCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
    FaultInjector::reset();
  }
  void TearDown() override { FaultInjector::reset(); }
};

constexpr Fault kGpuFaults[] = {Fault::kTransferCopy, Fault::kEventRecord, Fault::kEventQuery};

TEST_F(FaultInjectionCuda, CopyAndEventFaultsInThePipelineSurfaceAndEverySlabReturns) {
  std::mt19937_64 rng(1126);
  uint64_t surfaced = 0;
  uint64_t completed = 0;
  for (const size_t threads : {1, 2, 4, 8}) {
    for (int round = 0; round < 8; ++round) {
      for (const Fault fault : kGpuFaults) {
        const uint64_t samples = 40 + rng() % 300;
        auto truth = std::make_shared<const SyntheticSource>(testing::random_synthetic_options(rng, samples));
        PipelineOptions options;
        options.device = "cuda:0";
        options.batch_size = 1 + rng() % 12;
        options.decode_threads = threads;
        options.prefetch = 1 + rng() % 4;
        const uint64_t batches = (samples + options.batch_size - 1) / options.batch_size;
        // Queries repeat while a copy runs: their fault lands anywhere in the run.
        const uint64_t at = fault == Fault::kEventQuery ? rng() % (4 * batches) : rng() % batches;
        SCOPED_TRACE(std::string(fault_name(fault)) + " fails at call " + std::to_string(at) + ", " +
                     std::to_string(threads) + " threads, batch_size " + std::to_string(options.batch_size));
        StageSet stages = make_standard_stages(truth, options);
        std::shared_ptr<PinnedPool> pool = stages.pool;
        auto pipeline = std::make_unique<Pipeline>(pipeline_from_stages(std::move(stages), options));
        FaultInjector::arm(fault, at);
        uint64_t taken = 0;
        std::optional<Error> error;
        try {
          while (auto batch = pipeline->next()) {
            ASSERT_EQ(testing::compare_with_reference(*batch, *truth), "");
            ++taken;
          }
        } catch (const Error& e) {
          error = e;
        }
        if (FaultInjector::fired(fault) == 0) {
          EXPECT_FALSE(error) << error->what();
          EXPECT_EQ(taken, batches);
          ++completed;
        } else {
          ASSERT_TRUE(error) << "an injected " << fault_name(fault) << " failure went unreported";
          EXPECT_NE(std::string(error->what()).find("unknown error"), std::string::npos) << error->what();
          if (fault == Fault::kTransferCopy) {
            EXPECT_EQ(error->batch_index(), at) << error->what();
            EXPECT_EQ(taken, at);
          }
          ++surfaced;
        }
        FaultInjector::reset();
        pipeline.reset();
        EXPECT_EQ(pool.use_count(), 1) << "a lease outlived its pipeline";
        EXPECT_EQ(pool->stats().leased_bytes, 0u) << "a slab did not come back";
        if (HasFatalFailure()) return;
      }
    }
  }
  std::cout << "[ measured ] " << surfaced << " injected GPU faults surfaced, " << completed
            << " runs ended before their fault's call\n";
  EXPECT_GT(surfaced, 0u);
}

TEST_F(FaultInjectionCuda, ACopyFaultInStartCopyNamesItsTensorAndLeavesTheNextCopyRight) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<Nested> tensors;
    const int count = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < count; ++i) tensors.emplace_back(at::randn({static_cast<int64_t>(1 + rng() % 50000)}));
    const Nested data = Nested::list(tensors);
    CopyOptions options;
    options.use_background_thread = round % 2 == 0;
    options.max_packed_chunk_bytes = 1 + rng() % (1 << 20);
    FaultInjector::arm(Fault::kTransferCopy, rng() % 4);
    try {
      (void)start_copy(data, at::Device(at::kCUDA, 0), options).get();
      EXPECT_EQ(FaultInjector::fired(Fault::kTransferCopy), 0u) << "an injected copy failure went unreported";
    } catch (const Error& e) {
      EXPECT_EQ(FaultInjector::fired(Fault::kTransferCopy), 1u);
      EXPECT_NE(std::string(e.what()).find("unknown error"), std::string::npos) << e.what();
    }
    FaultInjector::reset();
    const Nested copied = start_copy(data, at::Device(at::kCUDA, 0), options).get();
    for (int i = 0; i < count; ++i)
      EXPECT_TRUE(at::equal(copied[static_cast<size_t>(i)].tensor().cpu(), tensors[i].tensor()));
  }
}

// 1000 pipelines on the GPU, every way a pipeline ends: device memory, staging bytes and threads
// stay flat (the C++ CPU version: tests/stress/leak_test.cpp).
TEST_F(FaultInjectionCuda, AThousandGpuPipelinesLeaveNoDeviceMemoryBehind) {
  const auto cycle = [](int i) {
    SyntheticOptions data;
    data.seed = static_cast<uint64_t>(i);
    data.samples = 64;
    data.fields = {SyntheticField{"x", at::kFloat, {32, 32}, false, 0, 0, std::nullopt},
                   SyntheticField{"tokens", at::kInt, {}, true, 1, 200, std::nullopt}};
    PipelineOptions options;
    options.device = "cuda:0";
    options.batch_size = 16;
    options.prefetch = 2 + i % 3;
    options.decode_threads = 1 + static_cast<size_t>(i % 3);
    Pipeline pipeline = make_pipeline(std::make_shared<const SyntheticSource>(data), options);
    if (i % 3 == 0) (void)pipeline.next();  // then dropped with copies in flight
    if (i % 3 == 1) {
      while (pipeline.next()) {
      }
    }
  };
  const auto free_device_bytes = [] {
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    size_t free = 0;
    size_t total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) (void)cudaGetLastError();
    return free;
  };
  for (int i = 0; i < 50; ++i) cycle(i);  // warm-up
  const size_t free_before = free_device_bytes();
  for (int i = 50; i < 1050; ++i) {
    cycle(i);
    ASSERT_EQ(PinnedPool::live_bytes(), 0u) << "staging memory outlived pipeline " << i;
  }
  const size_t free_after = free_device_bytes();
  const double lost_mib = (static_cast<double>(free_before) - static_cast<double>(free_after)) / (1 << 20);
  std::cout << "[ measured ] 1000 GPU pipelines: device memory " << (lost_mib > 0 ? "-" : "+") << std::abs(lost_mib)
            << " MiB free\n";
  EXPECT_LT(lost_mib, 64.0) << "device memory leaked";
}

#else

TEST(FaultInjectionCuda, NeedsAGpuBuild) { GTEST_SKIP() << "no CUDA device: not a GPU build: " FERRY_BUILD_REASON; }

#endif

}  // namespace
}  // namespace ferry
