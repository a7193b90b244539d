#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/io/decoders/decoder.h"
#include "ferry/io/decoders/image_decode_options.h"
#include "ferry/io/decoders/image_resample.h"
#include "ferry/io/util/splitmix64.h"

// What the image decoders (jpeg, png, webp) share: which part of an image a sample keeps, how it is
// resampled to the output, and the window a sample reports. Internal: not installed.

namespace ferry::detail {

// Note [image geometry]
// ~~~~~~~~~~~~~~~~~~~~~
// Every image decoder follows torchvision's transforms step for step, so that a model trained on
// ferry's images sees what torchvision would have given it:
//  * Resize(resize_shorter) then CenterCrop or RandomCrop of the field's [H, W]: the whole image is
//    resampled to the resized size, of which the crop's rows and columns are computed (only those: the
//    rest of the resized image is never made). The center crop's offsets are torchvision's,
//    round((resized - crop) / 2) with Python's rounding (ties to even).
//  * RandomResizedCrop: an integer window (top, left, height, width) of the whole image, drawn as
//    torchvision draws it (draw_resized_crop()), resampled to the field's [H, W].
//  * RandomHorizontalFlip after either: the output's columns mirrored.
// One axis of this is an AxisWindow: the region [begin, end) of the image's pixels resampled to `grid`
// pixels, of which [first, first + count) are kept. Resampling is Pillow's (and torchvision's
// antialiased resize's) separable filter, image_resample.h. The same numbers describe the window a
// sample reports (`<field>_window`, window_values()), from which box targets follow the image.

/// The most pixels an image decoder decodes at once (384 MiB as RGB; PIL refuses past 179M as a
/// decompression bomb). A file of a few hundred bytes can claim 65535 x 65535 pixels: without a cap,
/// every decode thread would allocate 12 GiB for it before finding the data missing.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 27;

/// One axis of an image's window (Note [image geometry]).
struct AxisWindow {
  double begin = 0, end = 0;     // the region of the image, in its pixels
  int64_t grid = 0;              // resampled to this many pixels
  int64_t first = 0, count = 0;  // of which these are kept

  /// Where the kept pixels start in the image, and how many of its pixels they cover.
  double shown_begin() const noexcept {
    return begin + static_cast<double>(first) * (end - begin) / static_cast<double>(grid);
  }
  double shown_size() const noexcept { return static_cast<double>(count) * (end - begin) / static_cast<double>(grid); }
};

/// Where a decoded image's output comes from: the image's own size, each axis's window, the flip.
struct ImageWindow {
  int64_t height = 0, width = 0;
  AxisWindow rows, columns;
  bool flip = false;

  int64_t out_h() const noexcept { return rows.count; }
  int64_t out_w() const noexcept { return columns.count; }
};

/// Throws ferry::Error for a decoder named `name` (of `kind`: "jpeg", "png", "webp") with an empty name,
/// negative sizes, a crop with one side 0 and the other not, or crop parameters out of range.
void check_image_options(const ImageDecodeOptions& options, std::string_view kind, const std::string& name);

/// Throws ferry::Error unless `spec` is a uint8 [H, W, 3] field (H, W >= 1, or any for a field of
/// images of their own size), as `decoder` makes.
void check_image_field(const FieldSpec& spec, std::string_view decoder);

/// `encoded` as contiguous bytes for the `decoder` ("jpeg", "png", "webp") of `format` ("JPEG", "PNG",
/// "WebP") files, after check_image_field(spec, decoder). Throws ferry::Error unless they are non-empty uint8 data.
at::Tensor encoded_image_bytes(const at::Tensor& encoded, const FieldSpec& spec, std::string_view decoder,
                               std::string_view format);

/// What random choices are drawn from (Note [random crop]): the sample in a pipeline (`context`), else
/// the `size` encoded bytes at `data`.
struct CropSource {
  const DecodeContext* context = nullptr;
  const uint8_t* data = nullptr;
  int64_t size = 0;
};

/// The window of an image of height x width (`format`: "JPEG", "PNG", for messages) that `options`
/// keep (Note [image geometry]). Throws ferry::Error, naming both sizes and the options to set, when the
/// image is smaller than a crop or the window is not the field's [H, W].
ImageWindow plan_image_window(std::string_view format, int64_t height, int64_t width, const ImageDecodeOptions& options,
                              const CropSource& crop, const FieldSpec& spec);

/// A window of an image drawn as torchvision's RandomResizedCrop.get_params draws it: up to 10 tries of
/// an area share uniform in [scale_min, scale_max] and an aspect ratio log-uniform in [ratio_min,
/// ratio_max], the sides rounded to nearest (ties to even, as Python's round()), kept when it fits, at a
/// place drawn uniformly; else the largest central window whose ratio is clamped to the range.
struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};
CropBox draw_resized_crop(int64_t height, int64_t width, double scale_min, double scale_max, double ratio_min,
                          double ratio_max, SampleStream& random);

/// The row and column taps that resample `window` from its image decoded at source_h x source_w (its
/// own size, or smaller by the same factor on both axes as a DCT-scaled JPEG decode makes it): the CPU
/// path applies them (resample_window()), the GPU decoder's kernel the same tables.
struct WindowTaps {
  ResampleTaps rows, columns;
};
WindowTaps window_taps(const ImageWindow& window, int64_t source_h, int64_t source_w,
                       const ImageDecodeOptions& options);

/// Whether `window` is all of its image, unresampled and unflipped: the decoded image is the output.
bool whole_image(const ImageWindow& window) noexcept;

/// The output of `window` made from `image` (uint8 [h, w, 3], contiguous: the image decoded at its own
/// size, or smaller by the same factor on both axes as a DCT-scaled JPEG decode makes it), with the
/// options' filter. Returns `image` itself when the window is all of it, unflipped.
at::Tensor resample_window(const at::Tensor& image, const ImageWindow& window, const ImageDecodeOptions& options);

/// What a sample's `<field>_window` holds, float32 [kWindowValues]: the region of the image the output
/// shows (top, left, height, width, in the image's pixels; fractional after a resize), flipped (1) or
/// not (0), the image's own height and width, the output's height and width.
inline constexpr int64_t kWindowValues = 9;
at::Tensor window_values(const ImageWindow& window);
/// The spec of `<field>_window` for an image field.
FieldSpec window_field(const FieldSpec& image);

/// The image decoders' companions (Decoder::companions()): the window field when options.window.
std::vector<FieldSpec> image_companions(const ImageDecodeOptions& options, const FieldSpec& spec);
/// Gives `context` the window companion of a decoded image, when it asks for companions.
void report_window(const ImageDecodeOptions& options, const ImageWindow& window, const DecodeContext* context);

/// What a JPEG's header says (TurboJPEG's tjDecompressHeader3): its size, chroma subsampling (TJSAMP_*)
/// and colour space (TJCS_*).
struct JpegHeader {
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
};
/// TurboJPEG's TJCS_CMYK and TJCS_YCCK, for code that does not include turbojpeg.h.
inline constexpr int kJpegColorspaceCmyk = 3;
inline constexpr int kJpegColorspaceYcck = 4;

/// Reads the header of the `size` bytes at `data`. Throws ferry::Error for bytes that are not a JPEG
/// and for one without pixels. Thread-safe.
JpegHeader read_jpeg_header(const uint8_t* data, int64_t size);

/// How far a JPEG decoder shrinks an image in the DCT domain before resampling `window` (libjpeg-turbo's
/// scaled IDCTs: 1, 2, 4 or 8): with options.dct_scaling, the largest factor that keeps at least the
/// size the window's region is resampled to; 1 otherwise.
int jpeg_shrink_factor(const ImageWindow& window, const ImageDecodeOptions& options);

}  // namespace ferry::detail
