#include "ferry/pipeline/cuda_device.h"

#include <algorithm>
#include <chrono>

#include "ferry/build_config.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/device_guard.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {

int cuda_device_count() noexcept {
#if FERRY_HAVE_CUDART
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

std::string cuda_unavailable_reason() {
#if FERRY_HAVE_CUDART
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no CUDA device: cudaGetDeviceCount failed with ") + cudaGetErrorName(error) + " (" +
           cudaGetErrorString(error) + ")";
  }
  return count > 0 ? std::string() : std::string("no CUDA device: the driver reports 0 devices");
#else
  return "no CUDA device: ferry was built without the CUDA runtime (" FERRY_BUILD_REASON ")";
#endif
}

bool gpu_build() noexcept { return FERRY_WITH_GPU != 0; }

std::string build_description() { return FERRY_BUILD_KIND " build: " FERRY_BUILD_REASON; }

std::vector<CudaDeviceInfo> cuda_devices(bool free_memory) {
  std::vector<CudaDeviceInfo> devices;
#if FERRY_HAVE_CUDART
  const int count = cuda_device_count();
  for (int index = 0; index < count; ++index) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    CudaDeviceInfo info;
    info.index = index;
    info.name = properties.name;
    info.total_bytes = properties.totalGlobalMem;
    info.major = properties.major;
    info.minor = properties.minor;
    char bus[32] = "";
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, index) == cudaSuccess) info.pci_bus_id = bus;
    (void)cudaGetLastError();
    int previous = 0;
    if (free_memory && cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(index) == cudaSuccess) {
      size_t free = 0;
      size_t total = 0;
      if (cudaMemGetInfo(&free, &total) == cudaSuccess) info.free_bytes = free;
      (void)cudaSetDevice(previous);
    }
    (void)cudaGetLastError();
    devices.push_back(std::move(info));
  }
#else
  (void)free_memory;
#endif
  return devices;
}

namespace {

std::string version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace

std::string cuda_runtime_version() {
#if FERRY_HAVE_CUDART
  int version = 0;
  if (cudaRuntimeGetVersion(&version) != cudaSuccess) {
    (void)cudaGetLastError();
    return "unknown";
  }
  return version_text(version);
#else
  return "none";
#endif
}

std::string cuda_driver_version() {
#if FERRY_HAVE_CUDART
  int version = 0;
  if (cudaDriverGetVersion(&version) != cudaSuccess) {
    (void)cudaGetLastError();
    return "unknown";
  }
  return version == 0 ? std::string("none (no driver)") : version_text(version);
#else
  return "none";
#endif
}

double measure_h2d_bandwidth(int device, size_t bytes) {
#if FERRY_HAVE_CUDART
  DeviceGuard guard(device);
  void* host = nullptr;
  void* target = nullptr;
  cudaStream_t stream = nullptr;
  // Frees whatever was allocated, also when a check below throws.
  struct Release {
    void*& host;
    void*& target;
    cudaStream_t& stream;
    ~Release() {
      if (stream != nullptr) (void)cudaStreamDestroy(stream);
      if (target != nullptr) (void)cudaFree(target);
      if (host != nullptr) (void)cudaFreeHost(host);
      (void)cudaGetLastError();
    }
  } release{host, target, stream};
  FERRY_CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  FERRY_CUDA_CHECK(cudaMalloc(&target, bytes));
  FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::fill_n(static_cast<char*>(host), bytes, 1);  // touch every page before timing
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    FERRY_CUDA_CHECK(cudaMemcpyAsync(target, host, bytes, cudaMemcpyHostToDevice, stream));
    FERRY_CUDA_CHECK(cudaStreamSynchronize(stream));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (round > 0) best = std::max(best, static_cast<double>(bytes) / seconds / 1e9);  // round 0 warms up
  }
  return best;
#else
  (void)device;
  (void)bytes;
  throw Error("measure_h2d_bandwidth: ferry was built without the CUDA runtime");
#endif
}

}  // namespace ferry
