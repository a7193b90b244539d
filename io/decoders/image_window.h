#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>

#include "ferry/io/decoders/decoder.h"
#include "ferry/io/decoders/image_decode_options.h"

// What the image decoders (jpeg, png) share: which window of the resized image a sample keeps, and
// the resize that makes it. Internal: not installed.

namespace ferry::detail {

/// The most pixels an image decoder decodes at once (384 MiB as RGB; PIL refuses past 179M as a
/// decompression bomb). A file of a few hundred bytes can claim 65535 x 65535 pixels: without a cap,
/// every decode thread would allocate 12 GiB for it before finding the data missing.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 27;

/// Where a decoded image's output comes from: the image resized to resized_h x resized_w (its own
/// size when not resizing), of which the window at (top, left) of out_h x out_w is kept.
struct ImageWindow {
  int64_t resized_h = 0, resized_w = 0;
  int64_t top = 0, left = 0;
  int64_t out_h = 0, out_w = 0;
};

/// Throws ferry::Error for a decoder named `name` (of `kind`: "jpeg", "png") with an empty name,
/// negative sizes, or a crop with one side 0 and the other not.
void check_image_options(const ImageDecodeOptions& options, std::string_view kind, const std::string& name);

/// Throws ferry::Error unless `spec` is a uint8 [H, W, 3] field (H, W >= 1), as `decoder` makes.
void check_image_field(const FieldSpec& spec, std::string_view decoder);

/// `encoded` as contiguous bytes for the `decoder` ("jpeg", "png") of `format` ("JPEG", "PNG") files,
/// after check_image_field(spec, decoder). Throws ferry::Error unless they are non-empty uint8 data.
at::Tensor encoded_image_bytes(const at::Tensor& encoded, const FieldSpec& spec, std::string_view decoder,
                               std::string_view format);

/// What a random crop is drawn from (Note [random crop]): the sample in a pipeline (`context`), else
/// the `size` encoded bytes at `data`.
struct CropSource {
  const DecodeContext* context = nullptr;
  const uint8_t* data = nullptr;
  int64_t size = 0;
};

/// The window of an image of height x width (`format`: "JPEG", "PNG", for messages) that `options`
/// keep: resized so that its shorter side is resize_shorter, then cropped (a random crop drawn from
/// options.seed and `crop`). Throws ferry::Error, naming both sizes and the options to set, when the
/// image is smaller than the crop or the window is not the field's [H, W].
ImageWindow plan_image_window(std::string_view format, int64_t height, int64_t width, const ImageDecodeOptions& options,
                              const CropSource& crop, const FieldSpec& spec);

/// What a JPEG's header says (TurboJPEG's tjDecompressHeader3): its size, chroma subsampling (TJSAMP_*)
/// and colour space (TJCS_*).
struct JpegHeader {
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
};

/// Reads the header of the `size` bytes at `data`. Throws ferry::Error for bytes that are not a JPEG,
/// for CMYK and YCCK JPEGs (which ferry does not decode) and for one without pixels. Thread-safe.
JpegHeader read_jpeg_header(const uint8_t* data, int64_t size);

/// How far a JPEG decoder shrinks an image of `width` x `height` in the DCT domain before the bilinear step
/// for `window` (libjpeg-turbo's scaled IDCTs: 1, 2, 4 or 8): the largest factor that keeps at least the
/// resized size, when resizing. The GPU decoder averages blocks of the same size (Note [GPU JPEG decode]).
int jpeg_shrink_factor(int width, int height, const ImageWindow& window, const ImageDecodeOptions& options);

/// `image` (uint8 [h, w, 3], contiguous) shrunk by averaging each `factor` x `factor` block:
/// [h / factor, w / factor, 3], the rest rows and columns dropped. An area average, for shrinking
/// by more than the bilinear step can without aliasing. Allocates the result.
at::Tensor shrink_by_blocks(const at::Tensor& image, int64_t factor);

/// The window `g` of `image` (uint8 [h, w, 3], contiguous), which is the image resized to
/// g.resized_h x g.resized_w: sliced when h x w is that size, else resized bilinearly (at most a 2x
/// shrink keeps it free of aliasing). Returns a contiguous uint8 [out_h, out_w, 3] tensor.
at::Tensor cut_window(const at::Tensor& image, const ImageWindow& g);

}  // namespace ferry::detail
