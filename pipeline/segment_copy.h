#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ferry/pipeline/cuda_types.h"

namespace ferry {

/// One piece of a gather: `copy_bytes` from `source` to `target`, then `fill_bytes` more of `target`
/// with `pattern` (an element of `element_bytes` bytes, repeated). A fill alone (copy_bytes 0) writes
/// a value, such as one sample's length, without a host-to-device copy.
struct CopySegment {
  std::byte* target = nullptr;
  const std::byte* source = nullptr;
  uint64_t copy_bytes = 0;
  uint64_t fill_bytes = 0;
  std::array<std::byte, 8> pattern{};
  uint32_t element_bytes = 1;  // 1, 2, 4 or 8
};

/// Runs `segments` on the calling thread (host memory on both sides). Blocks: while it copies.
void copy_segments_on_host(std::span<const CopySegment> segments) noexcept;

/// Queues `segments` on `stream` as kernels (one per kSegmentsPerLaunch) (device-accessible memory on both sides:
/// device or managed). Returns once they are queued. Throws ferry::CudaError for a failed launch, and ferry::Error in a
/// build without the kernel (segment_kernel_reason() says why).
void copy_segments_on_device(std::span<const CopySegment> segments, CudaStreamHandle stream);

/// "" when this build has the gather kernel; else why not (no CUDA compiler, a CPU build).
const char* segment_kernel_reason() noexcept;

namespace detail {
/// How many segments one kernel launch takes: they travel in the launch's parameters (up to 32 KiB
/// since CUDA 12.1 on Volta and newer), so a gather needs no host-to-device copy of its own, and a
/// batch of 256 samples of two fields is one launch.
inline constexpr size_t kSegmentsPerLaunch = 512;
/// The kernel's launcher (segment_copy_kernel.cu); `count` <= kSegmentsPerLaunch.
void launch_segment_kernel(const CopySegment* segments, size_t count, CudaStreamHandle stream);
}  // namespace detail

}  // namespace ferry
