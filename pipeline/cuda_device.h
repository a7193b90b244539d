#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ferry {

/// Number of CUDA devices this process can use; 0 where the build has no CUDA runtime, there is no
/// driver or no device. Never throws. Thread-safe.
int cuda_device_count() noexcept;

/// Why cuda_device_count() is 0 ("no CUDA device: cudaGetDeviceCount failed with ..."), or "" when
/// there is a device.
std::string cuda_unavailable_reason();

/// True when this build can deliver batches to a GPU (CUDA runtime and a CUDA-enabled libtorch).
bool gpu_build() noexcept;

/// Which build this is and why, as the configure step said it ("GPU build: ...", "CPU build: ...").
std::string build_description();

/// What `ferry info` shows of a device.
struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  size_t total_bytes = 0;
  size_t free_bytes = 0;  // only from cuda_devices(/*free_memory=*/true)
  int major = 0;          // compute capability
  int minor = 0;
  std::string pci_bus_id;
};

/// The visible devices; empty when there are none (see cuda_unavailable_reason()). Never throws.
/// `free_memory` also reads each device's free memory, which creates a CUDA context on every device
/// (hundreds of MiB each): right for `ferry info`, wrong for a report written by one rank of many.
std::vector<CudaDeviceInfo> cuda_devices(bool free_memory = false);

/// "13.0" for the CUDA runtime ferry was linked with, and for the newest CUDA the driver supports;
/// "none" without the runtime, "unknown" when the call fails.
std::string cuda_runtime_version();
std::string cuda_driver_version();

/// Host-to-device bandwidth from pinned memory, in GB/s: the best of a few copies of `bytes`.
/// Allocates `bytes` of pinned and device memory for the measurement. Throws ferry::CudaError.
double measure_h2d_bandwidth(int device, size_t bytes);

}  // namespace ferry
