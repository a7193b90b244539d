#pragma once

#include <cstddef>
#include <cstdint>

#include "ferry/pipeline/cuda_types.h"

// What ImageAugment's host loop and its CUDA kernel share: plain structs and one function both
// compile, so that the two compute the same thing. Internal: not installed; no libtorch here (nvcc
// compiles it).

#if defined(__CUDACC__)
#define FERRY_HOST_DEVICE __host__ __device__
#else
#define FERRY_HOST_DEVICE
#endif

namespace ferry::detail {

/// One sample's random choices: the window of its image that is resized to the output, and whether
/// the output is flipped horizontally (Note [image augment] in image_augment.h).
struct AugmentDraw {
  int32_t top = 0;
  int32_t left = 0;
  int32_t height = 0;
  int32_t width = 0;
  int32_t flip = 0;
};

/// What is the same for every sample of a pipeline.
struct AugmentShape {
  int32_t in_h = 0, in_w = 0;    // the image field's [H, W] (3 channels, uint8)
  int32_t out_h = 0, out_w = 0;  // the output's
  int32_t dtype = 0;             // AugmentOptions::DType
  int32_t nchw = 1;              // 0: NHWC
  float scale[3] = {1, 1, 1};    // value = interpolated pixel * scale[c] + shift[c]
  float shift[3] = {0, 0, 0};
};

/// Where output row or column `o` of `out` samples its window of `in` pixels starting at `start`:
/// the two source indices and the second one's weight. The rule of torch's bilinear interpolation
/// with align_corners=False (upsample_bilinear2d): source = (o + 0.5) * in / out - 0.5, clamped at 0.
struct AugmentTap {
  int32_t first = 0;
  int32_t second = 0;
  float weight = 0;  // of `second`; `first` gets 1 - weight
};

FERRY_HOST_DEVICE inline AugmentTap augment_tap(int32_t o, int32_t start, int32_t in, int32_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  float source = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
  if (source < 0) source = 0;
  const auto index = static_cast<int32_t>(source);  // floor: source >= 0
  AugmentTap tap;
  tap.first = start + index;
  tap.second = start + index + (index < in - 1 ? 1 : 0);
  tap.weight = source - static_cast<float>(index);
  return tap;
}

/// The interpolated value of channel `c` at output pixel (y, x) of a sample whose image (uint8
/// [in_h, in_w, 3]) starts at `image`.
FERRY_HOST_DEVICE inline float augment_value(const uint8_t* image, const AugmentShape& shape, const AugmentTap& row,
                                             const AugmentTap& column, int c) {
  const int64_t stride = int64_t{shape.in_w} * 3;
  const uint8_t* top = image + row.first * stride;
  const uint8_t* bottom = image + row.second * stride;
  const float p00 = top[column.first * 3 + c], p01 = top[column.second * 3 + c];
  const float p10 = bottom[column.first * 3 + c], p11 = bottom[column.second * 3 + c];
  const float w1 = column.weight, w0 = 1.0f - w1;
  const float h1 = row.weight, h0 = 1.0f - h1;
  return h0 * (w0 * p00 + w1 * p01) + h1 * (w0 * p10 + w1 * p11);
}

/// How many samples one kernel launch takes: their draws travel in the launch's parameters (up to
/// 32 KiB since CUDA 12.1 on Volta and newer), so a batch of up to 1024 images is one launch.
inline constexpr size_t kAugmentDrawsPerLaunch = 1024;

/// The kernel's launcher (image_augment_kernel.cu): `count` <= kAugmentDrawsPerLaunch samples, the
/// first at `images` (device memory, uint8 [count, in_h, in_w, 3]), output to `out` (the first
/// sample's output). Throws ferry::CudaError for a failed launch.
void launch_augment_kernel(const uint8_t* images, const AugmentDraw* draws, size_t count, const AugmentShape& shape,
                           void* out, CudaStreamHandle stream);

}  // namespace ferry::detail
