#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/build_config.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/cuda_error.h>
#include <ferry/pipeline/cuda_event_pool.h>
#include <ferry/pipeline/cuda_stream.h>
#include <ferry/pipeline/pinned_pool.h>
#include "tests/support/stream_gate.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

using namespace std::chrono_literals;

#if FERRY_HAVE_CUDART

class PinnedPoolCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
  }
};

PinnedPoolOptions pinned(size_t slabs, size_t bytes) {
  PinnedPoolOptions options;
  options.slab_bytes = bytes;
  options.slab_count = slabs;
  options.pinned = true;
  return options;
}

TEST_F(PinnedPoolCuda, PinsEverySlabWithOneHostAllocAtStartUp) {
  auto pool = PinnedPool::create(pinned(4, 3 << 20));
  EXPECT_TRUE(pool->pinned());
  EXPECT_EQ(pool->stats().host_alloc_calls, 1u);
  for (int i = 0; i < 1000; ++i) {
    auto lease = pool->try_acquire();
    ASSERT_TRUE(lease);
    cudaPointerAttributes attributes{};
    FERRY_CUDA_CHECK(cudaPointerGetAttributes(&attributes, lease->data()));
    ASSERT_EQ(attributes.type, cudaMemoryTypeHost) << "slab memory is not page-locked";
  }
  EXPECT_EQ(pool->stats().host_alloc_calls, 1u) << "cudaHostAlloc after start-up";
  EXPECT_EQ(pool->stats().peak_bytes, size_t{3} << 20);
}

TEST_F(PinnedPoolCuda, ReusesSlabOnlyAfterItsCopyEventCompletes) {
  auto pool = PinnedPool::create(pinned(1, 1 << 20));
  auto events = CudaEventPool::create(0);
  CudaStream stream(0);
  void* device = nullptr;
  FERRY_CUDA_CHECK(cudaMalloc(&device, 1 << 20));

  testing::StreamGate gate;
  {
    auto lease = pool->try_acquire();
    ASSERT_TRUE(lease);
    std::memset(lease->data(), 0x5a, lease->size());
    gate.hold(stream.handle());
    FERRY_CUDA_CHECK(cudaMemcpyAsync(device, lease->data(), lease->size(), cudaMemcpyHostToDevice, stream.handle()));
    auto event = events->acquire();
    event->record(stream.handle());
    lease->attach_event(event);
  }  // the lease is gone; its slab must stay unavailable while the copy has not run

  auto waiter = std::async(std::launch::async, [&] { return pool->acquire(10s); });
  const auto until = std::chrono::steady_clock::now() + 300ms;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_FALSE(pool->try_acquire()) << "slab leased again while its copy was still queued";
    ASSERT_EQ(pool->stats().pending, 1u);
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(waiter.wait_for(0ms), std::future_status::timeout);

  gate.release();
  auto lease = waiter.get();  // returns once the event completes
  ASSERT_TRUE(lease);
  EXPECT_EQ(pool->stats().pending, 0u);
  EXPECT_GE(pool->stats().waits, 1u);

  std::vector<unsigned char> back(1 << 20);
  FERRY_CUDA_CHECK(cudaMemcpy(back.data(), device, back.size(), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < back.size(); i += 4093) ASSERT_EQ(back[i], 0x5a) << "the copy read an overwritten slab";
  FERRY_CUDA_CHECK(cudaFree(device));
}

TEST_F(PinnedPoolCuda, DestroyingThePoolWaitsForACopyStillReadingASlab) {
  auto events = CudaEventPool::create(0);
  CudaStream stream(0);
  void* device = nullptr;
  FERRY_CUDA_CHECK(cudaMalloc(&device, 1 << 20));
  testing::StreamGate gate;
  {
    auto pool = PinnedPool::create(pinned(1, 1 << 20));
    auto lease = pool->try_acquire();
    gate.hold(stream.handle());
    FERRY_CUDA_CHECK(cudaMemcpyAsync(device, lease->data(), lease->size(), cudaMemcpyHostToDevice, stream.handle()));
    auto event = events->acquire();
    event->record(stream.handle());
    lease->attach_event(event);
    lease->release();
    std::thread opener([&] {
      std::this_thread::sleep_for(100ms);
      gate.release();
    });
    const auto start = std::chrono::steady_clock::now();
    pool.reset();  // waits (bounded) for the copy, then frees
    EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
    opener.join();
  }
  stream.synchronize();
  FERRY_CUDA_CHECK(cudaFree(device));
}

#else

TEST(PinnedPoolCuda, NeedsTheCudaRuntime) { GTEST_SKIP() << "built without the CUDA runtime: " FERRY_BUILD_REASON; }

#endif

}  // namespace
}  // namespace ferry
