#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <c10/core/ScalarType.h>

#include "ferry/io/decoders/decoder.h"
#include "ferry/pipeline/cuda_types.h"
#include "ferry/stages/image_augment_kernel.h"
#include "ferry/stages/pipeline_options.h"

namespace ferry {

// Note [image augment]
// ~~~~~~~~~~~~~~~~~~~~
// A training loop wants float, normalized, NCHW images with random-resized crops and flips. The batch's
// uint8 [B, H, W, 3] images already sit in its device buffer once h2d has queued their copy, so the
// augmentation runs there, on ferry's stream, before the batch's event: one kernel launch per batch
// (ImageAugment::run_on_device), or on a CPU pipeline the same arithmetic on oneTBB's threads
// (run_on_host). The output goes to the same allocation as the rest of the batch, after the copied bytes,
// so the batch is still one buffer and one event; the delivered field is a view of that output.
//
// Per sample (draw()):
//  * random_resized_crop, as torchvision's RandomResizedCrop.get_params defines it: up to 10 tries of an
//    area share drawn uniformly from `scale` and an aspect ratio drawn log-uniformly from `ratio`, the
//    window's sides rounded to the nearest integer (ties to even, as Python's round()), kept when it fits
//    the image, at a place drawn uniformly; else the fallback, the largest central window whose ratio
//    is clamped to `ratio`. Without random_resized_crop the window is the whole image.
//  * flip, with probability `flip`, of the output's columns.
// Every draw comes from splitmix64 streams seeded by (seed, epoch, sample index), the crop's and the
// flip's apart, so runs, resumes, thread counts and devices give the same choices.
//
// Per output pixel: bilinear interpolation of the window, by torch's rule for align_corners=False
// (augment_tap()), in float, without antialiasing (torchvision's antialias matters only when the window
// is shrunk by more than about 2x, rare for 224 from a 256 image); then value * scale + shift per channel,
// which is value / 255 with or without (x - mean) / std folded in; then the output dtype, rounded to
// nearest even. torchvision resizes uint8 images in uint8 and rounds there; ferry keeps the float, so the
// two differ by up to half a level (0.5 / 255 before normalizing).
//
// The host loop and the kernel share augment_tap() and augment_value(), and both are compiled without
// fused multiply-adds (stages/CMakeLists.txt): with FMAs the kernel's float32 values differed from the
// host's by up to 1.4e-5 (on an H200), since one fused rounding in the source coordinate
// moves the interpolation weight. Without them each operation rounds alike, so a GPU and a CPU pipeline
// deliver the same bytes (ImageAugmentCuda tests every element for equality).

/// Augments the image field of batches: draws each sample's choices and runs them on the host or the
/// device. Immutable after construction; thread-safe.
class ImageAugment {
 public:
  /// For a uint8 image field of [image_height, image_width, 3]. Throws ferry::Error for options that
  /// do not fit (PipelineOptions::check's augment rules).
  ImageAugment(const AugmentOptions& options, int64_t image_height, int64_t image_width);

  const AugmentOptions& options() const noexcept { return options_; }
  /// The image field's [H, W] (of [H, W, 3]).
  int64_t image_height() const noexcept { return shape_.in_h; }
  int64_t image_width() const noexcept { return shape_.in_w; }
  /// The output's element type and shape for a batch of `batch` samples; its bytes.
  at::ScalarType dtype() const noexcept;
  std::vector<int64_t> shape(int64_t batch) const;
  size_t bytes(int64_t batch) const noexcept;

  /// The choices for sample `sample` (its source index) in epoch `epoch`. Allocates nothing.
  detail::AugmentDraw draw(uint64_t epoch, uint64_t sample) const noexcept;
  /// draw() for each sample of a batch.
  std::vector<detail::AugmentDraw> draws(uint64_t epoch, std::span<const uint64_t> samples) const;

  /// `images`: uint8 [draws.size(), H, W, 3], contiguous, host memory; `out`: bytes(draws.size()) bytes.
  /// Blocks while oneTBB's threads work on the samples.
  void run_on_host(const uint8_t* images, std::span<const detail::AugmentDraw> draws, void* out) const;
  /// The same on device memory: queues the kernel on `stream` and returns. Throws ferry::Error in a
  /// build without the kernel (segment_kernel_reason() says why), ferry::CudaError for a failed launch.
  void run_on_device(const uint8_t* images, std::span<const detail::AugmentDraw> draws, void* out,
                     CudaStreamHandle stream) const;

 private:
  AugmentOptions options_;
  detail::AugmentShape shape_;
};

/// The ImageAugment for `options.field` among a source's `fields`. Throws ferry::Error, naming the key
/// augment.field, for a field the source lacks or that is not uint8 [H, W, 3] of fixed size.
std::shared_ptr<const ImageAugment> make_image_augment(const AugmentOptions& options,
                                                       const std::vector<FieldSpec>& fields);

}  // namespace ferry
