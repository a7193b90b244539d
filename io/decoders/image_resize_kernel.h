#pragma once

#include <cstddef>
#include <cstdint>

#include "ferry/pipeline/cuda_types.h"

// The GPU JPEG decoder's resize and crop (Note [GPU JPEG decode] in nvjpeg_decoder.h): the CPU path's
// arithmetic (image_window.cpp's fixed-point bilinear taps) on the device. Internal: not installed; no
// libtorch here (nvcc compiles it).

namespace ferry::detail {

/// One image: its decoded pixels (uint8 [height, width, 3], rows `width * 3` apart), averaged in blocks
/// of `shrink` x `shrink` (the last ones partial, as libjpeg-turbo's scaled IDCT sizes them: the shrunk
/// image is ceil(width / shrink) x ceil(height / shrink)), then resized to resized_w x resized_h, of which
/// the window at (top, left) of out_w x out_h is written to `out` (contiguous).
struct ResizeJob {
  const uint8_t* source = nullptr;
  uint8_t* out = nullptr;
  int32_t width = 0, height = 0;
  int32_t shrink = 1;
  int32_t resized_w = 0, resized_h = 0;
  int32_t top = 0, left = 0;
  int32_t out_w = 0, out_h = 0;
};

/// How many images one launch takes: their jobs travel in the launch's parameters (CUDA 12.1+ allows 32 KiB).
inline constexpr size_t kResizeJobsPerLaunch = 256;

/// Queues `count` <= kResizeJobsPerLaunch jobs on `stream` as one kernel. Throws ferry::CudaError for a
/// failed launch.
void launch_resize_kernel(const ResizeJob* jobs, size_t count, CudaStreamHandle stream);

}  // namespace ferry::detail
