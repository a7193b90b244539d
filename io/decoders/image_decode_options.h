#pragma once

#include <cstdint>

namespace ferry {

/// How an image decoder (JpegDecoder, PngDecoder, WebpDecoder, ImageDecoder) turns each file into the
/// field's image: its own size, or resized and cropped so that a batch can be stacked, flipped at random,
/// as torchvision's transforms define these steps (Note [image geometry] in image_window.h).
struct ImageDecodeOptions {
  /// The shorter side after resizing, in pixels; the longer side keeps the aspect ratio
  /// (floor(resize_shorter * longer / shorter), as torchvision's Resize(int) does). 0: no resize.
  int64_t resize_shorter = 0;
  /// The crop, in pixels. Both 0: no crop; both > 0 otherwise.
  int64_t crop_height = 0;
  int64_t crop_width = 0;
  /// kCenter: the middle of the (resized) image, offsets rounded as torchvision's CenterCrop rounds
  /// them (to nearest, ties to even: Note [image geometry]). kRandom: a place drawn at random in the (resized)
  /// image (Note [random crop]). kRandomResized: torchvision's RandomResizedCrop: a window of the whole
  /// image whose area share is drawn from [scale_min, scale_max] and aspect ratio (width / height)
  /// log-uniformly from [ratio_min, ratio_max], resized to crop_height x crop_width (resize_shorter 0).
  enum class Crop { kCenter, kRandom, kRandomResized } crop = Crop::kCenter;
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  /// The probability that an image is flipped horizontally (after the crop, as RandomHorizontalFlip).
  double flip = 0.0;
  /// The resampling filter, and whether it is widened when shrinking (antialias, as PIL and
  /// torchvision's antialiased resize do; without it a shrink by more than 2x aliases).
  enum class Interpolation { kBilinear, kBicubic } interpolation = Interpolation::kBilinear;
  bool antialias = true;
  /// JPEG only: decode large images at 1/2, 1/4 or 1/8 of their size in the DCT domain where the
  /// resize shrinks them that much. Several times faster for large photos; the pixels are then no
  /// longer those of resizing the full decode (torchvision's), by a level or two.
  bool dct_scaling = false;
  /// Whether the decoder also gives the field `<field>_window`: each sample's crop window and flip
  /// (detail::window_values() in image_window.h), from which box targets follow the image.
  bool window = false;
  /// Seeds the random crops and flips; each image draws from (seed, epoch, sample).
  uint64_t seed = 0;
  /// Where JpegDecoder's images are decoded (Note [GPU JPEG decode] in nvjpeg_decoder.h): kCpu on the decode
  /// threads (libjpeg-turbo); kGpu on the delivery GPU's hardware decoder, every image it can decode (the
  /// others on the CPU); kAuto the CPU while the GPU decoder starts, then whichever of the two decoded
  /// faster (Note [auto: the faster decoder]). The other image decoders decode on the CPU.
  enum class Device { kCpu, kGpu, kAuto } device = Device::kCpu;

  /// Whether an image may come out otherwise in another epoch (a random crop or flip).
  bool random() const noexcept { return crop != Crop::kCenter || flip > 0; }
};

/// "cpu", "gpu", "auto".
const char* decode_device_name(ImageDecodeOptions::Device device) noexcept;

}  // namespace ferry
