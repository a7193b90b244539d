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
#include <dlfcn.h>
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

// A report lists the devices on every rank of a job: reading their properties must not put a CUDA
// context (hundreds of MiB) on each GPU. Only `ferry info`'s free memory may. The driver's own view
// of a device's primary context says whether one was made; ferry does not link the driver, so it is
// looked up at run time.
TEST(CudaHelpers, ListingTheDevicesMakesNoContextUnlessAskedForFreeMemory) {
  FERRY_REQUIRE_DEVICE();
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOW);
  if (driver == nullptr) GTEST_SKIP() << "no libcuda.so.1 to ask: " << ::dlerror();
  using DeviceGet = int (*)(int*, int);
  using PrimaryContextState = int (*)(int, unsigned*, int*);
  const auto device_get = reinterpret_cast<DeviceGet>(::dlsym(driver, "cuDeviceGet"));
  const auto context_state = reinterpret_cast<PrimaryContextState>(::dlsym(driver, "cuDevicePrimaryCtxGetState"));
  ASSERT_NE(device_get, nullptr);
  ASSERT_NE(context_state, nullptr);
  const auto has_context = [&](int index) {
    int device = 0;
    unsigned flags = 0;
    int active = 0;
    EXPECT_EQ(device_get(&device, index), 0);
    EXPECT_EQ(context_state(device, &flags, &active), 0);
    return active != 0;
  };
  const int count = cuda_device_count();
  for (int index = 0; index < count; ++index) {
    if (has_context(index)) GTEST_SKIP() << "device " << index << " has a context already in this process";
  }
  const std::vector<CudaDeviceInfo> devices = cuda_devices();
  ASSERT_EQ(static_cast<int>(devices.size()), count);
  for (int index = 0; index < count; ++index) {
    EXPECT_FALSE(devices[static_cast<size_t>(index)].name.empty());
    EXPECT_GT(devices[static_cast<size_t>(index)].total_bytes, 0u);
    EXPECT_EQ(devices[static_cast<size_t>(index)].free_bytes, 0u);
    EXPECT_FALSE(has_context(index)) << "cuda_devices() made a context on device " << index;
  }
  const std::vector<CudaDeviceInfo> with_free = cuda_devices(/*free_memory=*/true);
  ASSERT_EQ(static_cast<int>(with_free.size()), count);
  EXPECT_GT(with_free[0].free_bytes, 0u);
  EXPECT_LE(with_free[0].free_bytes, with_free[0].total_bytes);
  EXPECT_TRUE(has_context(0)) << "reading free memory needs a context: this test's probe is broken";
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
