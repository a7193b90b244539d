#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace ferry::testing {

/// An HWC uint8 image with `channels` channels: smooth gradients plus a little noise, what photographs
/// look like to an encoder, while the noise makes every image (and every crop of it) different.
at::Tensor test_image(int64_t height, int64_t width, int channels, uint64_t seed, int noise = 6);

/// The antialiased resize, written the obvious way in double precision: per output pixel, the source
/// pixels under a triangle (bilinear) or a = -0.5 cubic (bicubic) filter widened by the shrink factor,
/// weights normalized, columns first and each pass rounded to uint8, as Pillow defines it. The whole
/// image to out_h x out_w.
at::Tensor reference_resample(const at::Tensor& image, int64_t out_h, int64_t out_w, bool bicubic = false);

double mean_abs_diff(const at::Tensor& a, const at::Tensor& b);

/// How far an augmented value (Note [image augment]) may stray from a reference of `value` in a float
/// computed otherwise: a few float32 ulps (1e-5 relative) where only the order of the float operations
/// differs (libtorch's); one ulp of float16 (2^-10) or bfloat16 (2^-7) once
/// rounded to those, where a float an ulp away can land on the neighbouring value. Relative to |value|,
/// at least 1.
double augment_tolerance(at::ScalarType dtype, double value);

/// A uint8 HWC RGB image as PNG bytes (libpng's simplified writer), as a 1-D uint8 tensor.
at::Tensor encode_png(const at::Tensor& rgb);
double max_abs_diff(const at::Tensor& a, const at::Tensor& b);

}  // namespace ferry::testing
