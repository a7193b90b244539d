#include "ferry/io/decoders/jpeg_decoder.h"

#include <ATen/ATen.h>
#include <turbojpeg.h>

#include <memory>
#include <utility>

#include "ferry/io/decoders/image_window.h"
#include "ferry/io/decoders/turbojpeg_handle.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

// The Error for a failed TurboJPEG call; the thread's handle is discarded (Note [TurboJPEG handle
// per thread] in turbojpeg_handle.cpp).
Error turbojpeg_error(tjhandle handle, int64_t bytes, const char* doing) {
  const std::string message = tjGetErrorStr2(handle);
  const bool warning = tjGetErrorCode(handle) == TJERR_WARNING;
  discard_turbojpeg_handle(TurboJpegRole::kDecompress);
  if (warning) {
    // libjpeg would have carried on, e.g. padding a truncated scan with gray: refuse it instead.
    return Error("damaged JPEG (" + std::to_string(bytes) + " bytes) while " + doing + ": " + message +
                 " (libjpeg could only go on with a warning; ferry refuses such data rather than deliver made-up "
                 "pixels)");
  }
  return Error("corrupt JPEG (" + std::to_string(bytes) + " bytes) while " + doing + ": " + message);
}

// Note [CMYK JPEGs]
// TurboJPEG hands a CMYK or YCCK JPEG's channels over as stored; Adobe's files (practically all of
// them) store them inverted, 255 meaning no ink. They become RGB as Pillow's convert("RGB") and
// torchvision's decode_jpeg(mode=RGB) make them, without colour management: each channel times the
// black one's complement, r = nk - nk * c / 255 with nk = 255 - k (c, k inks), rounded as Pillow's
// MULDIV255 rounds.
at::Tensor cmyk_to_rgb(const at::Tensor& cmyk) {
  const int64_t pixels = cmyk.size(0) * cmyk.size(1);
  at::Tensor rgb = at::empty({cmyk.size(0), cmyk.size(1), 3}, at::kByte);
  const uint8_t* in = cmyk.data_ptr<uint8_t>();
  uint8_t* out = rgb.data_ptr<uint8_t>();
  const auto muldiv255 = [](int a, int b) {
    const int product = a * b + 128;
    return ((product >> 8) + product) >> 8;
  };
  for (int64_t i = 0; i < pixels; ++i) {
    const int nk = in[4 * i + 3];  // stored inverted: the black ink's complement
    for (int c = 0; c < 3; ++c) out[3 * i + c] = static_cast<uint8_t>(nk - muldiv255(255 - in[4 * i + c], nk));
  }
  return rgb;
}

}  // namespace

namespace detail {

static_assert(kJpegColorspaceCmyk == TJCS_CMYK && kJpegColorspaceYcck == TJCS_YCCK);

JpegHeader read_jpeg_header(const uint8_t* data, int64_t size) {
  tjhandle handle = turbojpeg_handle(TurboJpegRole::kDecompress);
  JpegHeader header;
  if (tjDecompressHeader3(handle, data, static_cast<unsigned long>(size), &header.width, &header.height,
                          &header.subsampling, &header.colorspace) != 0) {
    throw turbojpeg_error(handle, size, "reading the header");
  }
  if (header.width <= 0 || header.height <= 0) throw Error("JPEG (" + std::to_string(size) + " bytes) has no pixels");
  return header;
}

int jpeg_shrink_factor(const ImageWindow& window, const ImageDecodeOptions& options) {
  if (!options.dct_scaling) return 1;
  // The size the window's region is resampled to, scaled up to the whole image: the decode must keep at
  // least that many pixels for the resample to shrink (or keep) rather than enlarge.
  const double needed_h = static_cast<double>(window.rows.grid) * static_cast<double>(window.height) /
                          (window.rows.end - window.rows.begin);
  const double needed_w = static_cast<double>(window.columns.grid) * static_cast<double>(window.width) /
                          (window.columns.end - window.columns.begin);
  for (const int denominator : {8, 4, 2}) {
    const tjscalingfactor factor{1, denominator};
    if (TJSCALED(static_cast<int>(window.width), factor) >= needed_w &&
        TJSCALED(static_cast<int>(window.height), factor) >= needed_h) {
      return denominator;
    }
  }
  return 1;
}

}  // namespace detail

JpegDecoder::JpegDecoder(JpegDecodeOptions options, std::string name) : options_(options), name_(std::move(name)) {
  detail::check_image_options(options_, "jpeg", name_);
}

at::Tensor JpegDecoder::decode(const at::Tensor& encoded, const FieldSpec& spec) const {
  return decode_with(encoded, spec, nullptr);
}

at::Tensor JpegDecoder::decode_sample(const at::Tensor& encoded, const FieldSpec& spec,
                                      const DecodeContext& context) const {
  return decode_with(encoded, spec, &context);
}

at::Tensor JpegDecoder::decode_with(const at::Tensor& encoded, const FieldSpec& spec,
                                    const DecodeContext* context) const {
  const at::Tensor bytes = detail::encoded_image_bytes(encoded, spec, "jpeg", "JPEG");
  const int64_t size = bytes.numel();
  const uint8_t* data = bytes.data_ptr<uint8_t>();
  const auto jpeg_size = static_cast<unsigned long>(size);

  const detail::JpegHeader header = detail::read_jpeg_header(data, size);
  const int width = header.width, height = header.height;

  // Where the output comes from, decided from the header alone, so that a wrong size fails before
  // any pixel is decoded.
  const detail::ImageWindow g =
      detail::plan_image_window("JPEG", height, width, options_, detail::CropSource{context, data, size}, spec);

  // With dct_scaling, large images are shrunk in the DCT domain first: 1/2, 1/4 and 1/8 are
  // libjpeg-turbo's fast scaled IDCTs, and an 8x8 block scaled down is an area average.
  const int factor = detail::jpeg_shrink_factor(g, options_);
  const tjscalingfactor scaling{1, factor};
  const int decoded_w = TJSCALED(width, scaling), decoded_h = TJSCALED(height, scaling);
  tjhandle handle = turbojpeg_handle(TurboJpegRole::kDecompress);
  // Checked on what is decoded: a resize may decode a large JPEG at 1/2 to 1/8 of its size.
  if (int64_t{decoded_h} * decoded_w > detail::kMaxImagePixels) {
    throw Error("JPEG of " + std::to_string(width) + " x " + std::to_string(height) + " pixels (" +
                std::to_string(int64_t{decoded_h} * decoded_w) + " to decode) is larger than ferry decodes (" +
                std::to_string(detail::kMaxImagePixels) +
                " pixels at most): a damaged or hostile header, or an image to shrink before training (with "
                "dct_scaling, a resize decodes large JPEGs at 1/2 to 1/8 of their size)");
  }
  int flags = TJFLAG_STOPONWARNING;
#ifdef TJFLAG_LIMITSCANS
  flags |= TJFLAG_LIMITSCANS;  // refuses progressive JPEGs built to take minutes to decode
#endif
  const bool cmyk =
      header.colorspace == detail::kJpegColorspaceCmyk || header.colorspace == detail::kJpegColorspaceYcck;
  at::Tensor image = at::empty({decoded_h, decoded_w, cmyk ? 4 : 3}, at::kByte);
  if (tjDecompress2(handle, data, jpeg_size, image.data_ptr<uint8_t>(), decoded_w, decoded_w * (cmyk ? 4 : 3),
                    decoded_h, cmyk ? TJPF_CMYK : TJPF_RGB, flags) != 0) {
    throw turbojpeg_error(handle, size, "decoding");
  }
  if (cmyk) image = cmyk_to_rgb(image);
  at::Tensor out = detail::resample_window(image, g, options_);
  detail::report_window(options_, g, context);
  return out;
}

bool JpegDecoder::same_every_epoch() const { return !options_.random(); }

std::vector<FieldSpec> JpegDecoder::companions(const FieldSpec& spec) const {
  return detail::image_companions(options_, spec);
}

}  // namespace ferry
