#pragma once

#include <cstddef>
#include <cstdint>

#include "ferry/pipeline/cuda_types.h"

// The GPU JPEG decoder's resize, crop and flip (Note [GPU JPEG decode] in nvjpeg_decoder.h): the CPU
// path's arithmetic (image_resample.cpp's fixed-point Pillow filter, from the same tap tables, built on
// the host) on the device, so both paths give the same bytes from the same decoded pixels. Internal: not
// installed; no libtorch here (nvcc compiles it).

namespace ferry::detail {

/// One axis' taps in device memory, as ResampleTaps holds them: output i sums `count[i]` source pixels
/// from `first[i]`, weighted by weights[i * max_taps + t] (units of 1 << kResampleWeightBits).
struct DeviceTaps {
  const int32_t* first = nullptr;
  const int32_t* count = nullptr;
  const int32_t* weights = nullptr;
  int32_t max_taps = 0;
};

/// One image: its decoded pixels (uint8 [height, width, 3], rows `width * 3` apart) through the row and
/// column taps into `out` (uint8 [out_h, out_w, 3], contiguous), mirrored left to right with `flip`.
struct ResizeJob {
  const uint8_t* source = nullptr;
  uint8_t* out = nullptr;
  int32_t width = 0;
  int32_t out_w = 0, out_h = 0;
  int32_t flip = 0;
  DeviceTaps rows, columns;
};

/// How many images one launch takes: their jobs travel in the launch's parameters (CUDA 12.1+ allows 32 KiB).
inline constexpr size_t kResizeJobsPerLaunch = 256;

/// Queues `count` <= kResizeJobsPerLaunch jobs on `stream` as one kernel. Throws ferry::CudaError for a
/// failed launch.
void launch_resize_kernel(const ResizeJob* jobs, size_t count, CudaStreamHandle stream);

}  // namespace ferry::detail
