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

}  // namespace

namespace detail {

JpegHeader read_jpeg_header(const uint8_t* data, int64_t size) {
  tjhandle handle = turbojpeg_handle(TurboJpegRole::kDecompress);
  JpegHeader header;
  if (tjDecompressHeader3(handle, data, static_cast<unsigned long>(size), &header.width, &header.height,
                          &header.subsampling, &header.colorspace) != 0) {
    throw turbojpeg_error(handle, size, "reading the header");
  }
  if (header.colorspace == TJCS_CMYK || header.colorspace == TJCS_YCCK) {
    throw Error("CMYK JPEG (" + std::to_string(size) +
                " bytes): ferry decodes RGB and grayscale JPEGs only; converting CMYK needs a colour-management "
                "system, so convert the dataset to RGB once, offline");
  }
  if (header.width <= 0 || header.height <= 0) throw Error("JPEG (" + std::to_string(size) + " bytes) has no pixels");
  return header;
}

int jpeg_shrink_factor(int width, int height, const ImageWindow& window, const ImageDecodeOptions& options) {
  if (options.resize_shorter <= 0) return 1;
  for (const int denominator : {8, 4, 2}) {
    const tjscalingfactor factor{1, denominator};
    if (TJSCALED(width, factor) >= window.resized_w && TJSCALED(height, factor) >= window.resized_h) return denominator;
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

  // Shrink in the DCT domain first when the image is at least twice the resized size: 1/2, 1/4
  // and 1/8 are libjpeg-turbo's fast scaled IDCTs, and an 8x8 block scaled down is an area average,
  // which is what a large shrink needs (bilinear alone would alias). The bilinear step then does at
  // most a 2x shrink.
  const int factor = detail::jpeg_shrink_factor(width, height, g, options_);
  const tjscalingfactor scaling{1, factor};
  const int decoded_w = TJSCALED(width, scaling), decoded_h = TJSCALED(height, scaling);
  tjhandle handle = turbojpeg_handle(TurboJpegRole::kDecompress);
  // Checked on what is decoded: a resize may decode a large JPEG at 1/2 to 1/8 of its size.
  if (int64_t{decoded_h} * decoded_w > detail::kMaxImagePixels) {
    throw Error("JPEG of " + std::to_string(width) + " x " + std::to_string(height) + " pixels (" +
                std::to_string(int64_t{decoded_h} * decoded_w) + " to decode) is larger than ferry decodes (" +
                std::to_string(detail::kMaxImagePixels) +
                " pixels at most): a damaged or hostile header, or an image to shrink before training (a "
                "resize_shorter decodes large JPEGs at 1/2 to 1/8 of their size)");
  }
  at::Tensor image = at::empty({decoded_h, decoded_w, 3}, at::kByte);
  int flags = TJFLAG_STOPONWARNING;
#ifdef TJFLAG_LIMITSCANS
  flags |= TJFLAG_LIMITSCANS;  // refuses progressive JPEGs built to take minutes to decode
#endif
  if (tjDecompress2(handle, data, jpeg_size, image.data_ptr<uint8_t>(), decoded_w, decoded_w * 3, decoded_h, TJPF_RGB,
                    flags) != 0) {
    throw turbojpeg_error(handle, size, "decoding");
  }

  return detail::cut_window(image, g);
}

}  // namespace ferry
