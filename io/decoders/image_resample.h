#pragma once

#include <cstdint>
#include <vector>

// Resizing uint8 RGB images as Pillow's Image.resize does, byte for byte (Note [Pillow resampling] in
// image_resample.cpp): torchvision's PIL path, and the filter of its antialiased tensor resize. Internal:
// not installed; no libtorch here, so that a CUDA kernel can share the tap tables.

namespace ferry::detail {

enum class Interpolation { kBilinear, kBicubic };

/// The fixed-point weights' fraction bits (Pillow's PRECISION_BITS): a weight of 1.0 is 1 << 22. A sum
/// of uint8 values times weights, plus 1 << 21, shifted right by 22 and clamped to 0..255 is a pixel.
inline constexpr int kResampleWeightBits = 22;

/// A window of the source image, in source pixels (fractions allowed, as Pillow's `box`): what the
/// output covers. Pixels outside the window but inside the image still feed the output's edge pixels,
/// as in Pillow; to resize a crop as if it were the whole image (torchvision's resized_crop: crop, then
/// resize), pass the crop as the source image instead.
struct ResampleBox {
  double left = 0, top = 0, right = 0, bottom = 0;
};

/// One axis' filter: output coordinate i is the sum over t < count[i] of
/// source[first[i] + t] * weights[i * max_taps + t], in units of 1 << kResampleWeightBits. Taps never
/// leave the source (0 <= first[i], first[i] + count[i] <= in_size); weights past count[i] are 0;
/// first[] and first[] + count[] never decrease; max_taps is the widest count (a slice of a table may
/// keep its stride).
struct ResampleTaps {
  std::vector<int32_t> first, count;
  std::vector<int32_t> weights;
  int32_t max_taps = 0;
};

/// The taps that resize [box_begin, box_end) of an axis of in_size pixels to out_size pixels.
///
/// antialias: Pillow's filters exactly (the support widened by the scale when shrinking; bicubic with
/// a = -0.5; taps clipped to the image and renormalised; the box rounded to float32 as Pillow takes it).
/// Otherwise torch's interpolate(antialias=False, align_corners=False): 2 (bilinear) or 4 (bicubic,
/// a = -0.75) taps at any scale, the image's edge pixels repeated past its borders (this aliases when
/// shrinking, as torch does).
///
/// Either way resample_rgb() rounds to uint8 between its passes, as Pillow does and torch's float
/// interpolate does not: against torch, bilinear is within 1 level; bicubic is within 1 on smooth
/// content, but its overshoot at hard edges is clipped after the first pass, so there it can differ
/// by tens of levels (as Pillow differs from torch).
///
/// Requires in_size >= 1, out_size >= 1, 0 <= box_begin <= box_end <= in_size; throws
/// std::invalid_argument otherwise. Allocates; thread-safe.
ResampleTaps resample_taps(int64_t in_size, double box_begin, double box_end, int64_t out_size,
                           Interpolation interpolation, bool antialias);

/// Resizes the `box` of `src` (uint8 [src_h][src_w][3], rows `src_stride` bytes apart) to out_h x out_w
/// into `out` (out_h rows of out_w * 3 bytes, contiguous); `flip` mirrors the output left to right (as
/// resizing, then flipping). With antialias, the bytes are Pillow's: Image.resize((out_w, out_h),
/// resample, box, reducing_gap=None).
///
/// Two passes, horizontal then vertical, each rounded to uint8; the horizontal pass runs only on the
/// source rows the vertical pass reads, and a pass whose axis is a whole-pixel copy is skipped. Requires
/// what resample_taps() does for both axes and src_stride >= src_w * 3; throws std::invalid_argument
/// otherwise. Allocates its scratch (the tap tables and at most out_w x src_h pixels); thread-safe.
void resample_rgb(const uint8_t* src, int64_t src_h, int64_t src_w, int64_t src_stride, const ResampleBox& box,
                  uint8_t* out, int64_t out_h, int64_t out_w, Interpolation interpolation, bool antialias, bool flip);

/// The same from tap tables made by resample_taps() (or a slice of them: the rows and columns of a crop
/// of the resized image), for an image whose rows are `src_stride` bytes apart and hold every pixel the
/// taps read: `out` gets rows.first.size() rows of columns.first.size() pixels. Allocates its scratch;
/// thread-safe.
void resample_rgb_taps(const uint8_t* src, int64_t src_stride, const ResampleTaps& rows, const ResampleTaps& columns,
                       uint8_t* out, bool flip);

}  // namespace ferry::detail
