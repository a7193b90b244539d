#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace ferry::cli {

/// What `ferry make-dataset` puts in a generated image.
struct SyntheticImageSpec {
  int64_t height = 256;
  int64_t width = 256;
  /// The number of classes; the image's label picks its main object (see synthetic_image()).
  uint64_t classes = 10;
};

/// An image that looks like a photograph to a JPEG encoder, and whose class can be learnt: a
/// uint8 [H, W, 3] RGB tensor made from (seed, sample, label) alone.
///
/// What is in it: a background that is a smooth two-colour gradient in a random direction, with a
/// vignette; a few small distractor shapes of random colours; one large main object, shaded across
/// by a light from a random side, whose hue is the label's (the classes are spread around the colour
/// wheel) and whose shape is the label's too (label % 3: ellipse, rectangle, diamond), at a random
/// place, size and angle; then a mottled texture at three scales over everything and mild per-pixel
/// noise (-3..3 levels). Edges are anti-aliased over about two pixels. At 256x256 and JPEG quality
/// 90 such images compress to about 15-17 KB, as photos of that size do: neither flat (a few KB)
/// nor noise (150 KB and slow to encode). The class hues stay apart (more than the ±24/1536 hue
/// jitter) up to 31 classes; with more, neighbouring classes share colours and differ less.
///
/// Deterministic and the same on every machine: integer arithmetic only (a fixed table for angles,
/// no libm, no floating point whose rounding could differ), a SplitMix64 stream seeded from
/// (seed, sample). Thread-safe (no state); allocates the result and scratch (16 bytes a pixel);
/// about 0.5 ms at 256x256.
/// Throws ferry::Error for sides outside 1..65535, no classes, or a label >= classes.
at::Tensor synthetic_image(uint64_t seed, uint64_t sample, uint64_t label, const SyntheticImageSpec& spec);

}  // namespace ferry::cli
