#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/build_config.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/cuda_error.h>
#include <ferry/pipeline/cuda_event.h>
#include <ferry/pipeline/cuda_event_pool.h>
#include <ferry/pipeline/cuda_stream.h>
#include <ferry/pipeline/device_guard.h>

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

#define FERRY_REQUIRE_DEVICE()                                               \
  do {                                                                       \
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason(); \
  } while (0)

TEST(CudaHelpers, WithoutADeviceCreatingAStreamFailsWithTheCall) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  try {
    CudaStream stream(0);
    FAIL() << "a stream was created without a device";
  } catch (const Error& e) {
    const char* expected = FERRY_HAVE_CUDART ? "cudaGetDevice(&previous_) failed" : "without the CUDA runtime";
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

#if FERRY_HAVE_CUDART

TEST(CudaHelpers, DeviceGuardRestoresThePreviousDevice) {
  FERRY_REQUIRE_DEVICE();
  const int last = cuda_device_count() - 1;
  FERRY_CUDA_CHECK(cudaSetDevice(0));
  {
    DeviceGuard guard(last);
    int current = -1;
    FERRY_CUDA_CHECK(cudaGetDevice(&current));
    EXPECT_EQ(current, last);
  }
  int current = -1;
  FERRY_CUDA_CHECK(cudaGetDevice(&current));
  EXPECT_EQ(current, 0);
  EXPECT_THROW(DeviceGuard(4096), CudaError);
}

TEST(CudaHelpers, EventCompletesAfterTheWorkBeforeItsRecord) {
  FERRY_REQUIRE_DEVICE();
  CudaStream stream(0);
  CudaEvent event(0);
  EXPECT_TRUE(event.query());  // never recorded: complete
  std::vector<float> host(1 << 20, 1.5f);
  void* device = nullptr;
  FERRY_CUDA_CHECK(cudaMalloc(&device, host.size() * sizeof(float)));
  FERRY_CUDA_CHECK(
      cudaMemcpyAsync(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream.handle()));
  event.record(stream.handle());
  event.synchronize();
  EXPECT_TRUE(event.query());
  FERRY_CUDA_CHECK(cudaFree(device));
}

TEST(CudaHelpers, EventPoolRecyclesEvents) {
  FERRY_REQUIRE_DEVICE();
  auto pool = CudaEventPool::create(0);
  CudaEvent* first = nullptr;
  {
    auto event = pool->acquire();
    first = event.get();
  }
  auto again = pool->acquire();
  EXPECT_EQ(again.get(), first);
  auto second = pool->acquire();
  EXPECT_NE(second.get(), first);
  EXPECT_EQ(pool->created(), 2u);
}

#endif

}  // namespace
}  // namespace ferry
