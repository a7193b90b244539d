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
/// Either way resample_rgb_taps() rounds to uint8 between its passes, as Pillow does and torch's float
/// interpolate does not: against torch, bilinear is within 1 level; bicubic is within 1 on smooth
/// content, but its overshoot at hard edges is clipped after the first pass, so there it can differ
/// by tens of levels (as Pillow differs from torch).
///
/// Requires in_size >= 1, out_size >= 1, 0 <= box_begin <= box_end <= in_size; throws
/// std::invalid_argument otherwise. Allocates; thread-safe.
ResampleTaps resample_taps(int64_t in_size, double box_begin, double box_end, int64_t out_size,
                           Interpolation interpolation, bool antialias);

/// Resamples an image (uint8 RGB, rows `src_stride` bytes apart, holding every pixel the taps read) through
/// tap tables made by resample_taps() (or a slice of them: the rows and columns of a crop of the resized
/// image) into `out`: rows.first.size() rows of columns.first.size() pixels, contiguous, mirrored left to
/// right with `flip`. Two passes, horizontal then vertical, each rounded to uint8 as Pillow rounds; the
/// horizontal pass runs only on the source rows the vertical pass reads. With antialiased taps of a whole
/// axis, the bytes are Pillow's Image.resize(reducing_gap=None). Allocates its scratch; thread-safe.
void resample_rgb_taps(const uint8_t* src, int64_t src_stride, const ResampleTaps& rows, const ResampleTaps& columns,
                       uint8_t* out, bool flip);

}  // namespace ferry::detail
