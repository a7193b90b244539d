#pragma once

#include <cstdint>

namespace ferry {

/// How an image decoder (JpegDecoder, PngDecoder, ImageDecoder) makes every image of a field the same
/// size, so that a batch can be stacked. Resize first (when resize_shorter > 0), then crop (when
/// crop_height and crop_width are > 0).
struct ImageDecodeOptions {
  /// The shorter side after resizing, in pixels; the longer side keeps the aspect ratio
  /// (floor(resize_shorter * longer / shorter), as torchvision's Resize(int) does). 0: no resize.
  int64_t resize_shorter = 0;
  /// The crop, in pixels, taken from the (resized) image. Both 0: no crop; both > 0 otherwise.
  int64_t crop_height = 0;
  int64_t crop_width = 0;
  /// kCenter: the middle (offsets rounded down). kRandom: see Note [random crop].
  enum class Crop { kCenter, kRandom } crop = Crop::kCenter;
  /// Seeds kRandom crops; ignored by kCenter.
  uint64_t seed = 0;
  /// Where JpegDecoder's images are decoded (Note [GPU JPEG decode] in nvjpeg_decoder.h): kCpu on the decode
  /// threads (libjpeg-turbo); kGpu on the delivery GPU's hardware decoder, every image it can decode (the
  /// others on the CPU); kAuto the CPU while the GPU decoder starts, then whichever of the two decoded
  /// faster (Note [auto: the faster decoder]). The other image decoders decode on the CPU.
  enum class Device { kCpu, kGpu, kAuto } device = Device::kCpu;
};

/// "cpu", "gpu", "auto".
const char* decode_device_name(ImageDecodeOptions::Device device) noexcept;

}  // namespace ferry
