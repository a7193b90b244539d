#include "ferry/io/decoders/webp_decoder.h"

#include <ATen/ATen.h>
#include <webp/decode.h>

#include <cstring>
#include <utility>

#include "ferry/io/decoders/image_window.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

const char* status_text(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "the file ends early (truncated)";
  }
  return "unknown status";
}

}  // namespace

WebpDecoder::WebpDecoder(ImageDecodeOptions options, std::string name) : options_(options), name_(std::move(name)) {
  detail::check_image_options(options_, "webp", name_);
}

bool WebpDecoder::is_webp(const at::Tensor& encoded) {
  if (encoded.scalar_type() != at::kByte || encoded.numel() < 12) return false;
  const at::Tensor head = encoded.slice(0, 0, 12).contiguous();
  const auto* bytes = head.data_ptr<uint8_t>();
  return std::memcmp(bytes, "RIFF", 4) == 0 && std::memcmp(bytes + 8, "WEBP", 4) == 0;
}

at::Tensor WebpDecoder::decode(const at::Tensor& encoded, const FieldSpec& spec) const {
  return decode_with(encoded, spec, nullptr);
}

at::Tensor WebpDecoder::decode_sample(const at::Tensor& encoded, const FieldSpec& spec,
                                      const DecodeContext& context) const {
  return decode_with(encoded, spec, &context);
}

at::Tensor WebpDecoder::decode_with(const at::Tensor& encoded, const FieldSpec& spec,
                                    const DecodeContext* context) const {
  const at::Tensor bytes = detail::encoded_image_bytes(encoded, spec, "webp", "WebP");
  const int64_t size = bytes.numel();
  const uint8_t* data = bytes.data_ptr<uint8_t>();
  const auto length = static_cast<size_t>(size);
  WebPBitstreamFeatures features;
  if (const VP8StatusCode status = WebPGetFeatures(data, length, &features); status != VP8_STATUS_OK) {
    throw Error("corrupt WebP (" + std::to_string(size) + " bytes) while reading the header: " + status_text(status));
  }
  if (features.has_animation != 0) {
    throw Error("animated WebP (" + std::to_string(size) + " bytes): ferry decodes still images");
  }
  const int64_t height = features.height, width = features.width;
  if (height * width > detail::kMaxImagePixels) {
    throw Error("WebP of " + std::to_string(width) + " x " + std::to_string(height) + " pixels is larger than ferry " +
                "decodes (" + std::to_string(detail::kMaxImagePixels) + " pixels at most)");
  }
  const detail::ImageWindow window =
      detail::plan_image_window("WebP", height, width, options_, detail::CropSource{context, data, size}, spec);
  at::Tensor image = at::empty({height, width, 3}, at::kByte);
  const auto image_bytes = static_cast<size_t>(image.numel());
  if (WebPDecodeRGBInto(data, length, image.data_ptr<uint8_t>(), image_bytes, static_cast<int>(width * 3)) == nullptr) {
    // libwebp says no more than that it failed: its incremental decoder tells a truncated file apart.
    WebPDecoderConfig config;
    std::string why = "the data is damaged";
    if (WebPInitDecoderConfig(&config) != 0) {
      config.output.colorspace = MODE_RGB;
      const VP8StatusCode status = WebPDecode(data, length, &config);
      if (status != VP8_STATUS_OK) why = status_text(status);
      WebPFreeDecBuffer(&config.output);
    }
    throw Error("corrupt WebP (" + std::to_string(size) + " bytes) while decoding: " + why);
  }
  at::Tensor out = detail::resample_window(image, window, options_);
  detail::report_window(options_, window, context);
  return out;
}

bool WebpDecoder::same_every_epoch() const { return !options_.random(); }

std::vector<FieldSpec> WebpDecoder::companions(const FieldSpec& spec) const {
  return detail::image_companions(options_, spec);
}

}  // namespace ferry
