#pragma once

#include <string>

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

}  // namespace ferry
