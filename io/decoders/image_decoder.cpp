#include "ferry/io/decoders/image_decoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

// JPEG files start with a start-of-image marker and then another marker: FF D8 FF.
bool is_jpeg(const at::Tensor& encoded) {
  if (encoded.scalar_type() != at::kByte || encoded.numel() < 3) return false;
  const at::Tensor head = encoded.slice(0, 0, 3).contiguous();
  const uint8_t* bytes = head.data_ptr<uint8_t>();
  return bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
}

}  // namespace

ImageDecoder::ImageDecoder(ImageDecodeOptions options, std::string name)
    : name_(std::move(name)), jpeg_(options, name_), png_(options, name_), webp_(options, name_) {}

const Decoder& ImageDecoder::decoder_for(const at::Tensor& encoded) const {
  if (is_jpeg(encoded)) return jpeg_;
  if (PngDecoder::is_png(encoded)) return png_;
  if (WebpDecoder::is_webp(encoded)) return webp_;
  std::string head;
  if (encoded.scalar_type() == at::kByte) {
    const at::Tensor bytes = encoded.slice(0, 0, std::min<int64_t>(encoded.numel(), 8)).contiguous();
    for (int64_t i = 0; i < bytes.numel(); ++i) {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%02x", bytes.data_ptr<uint8_t>()[i]);
      if (!head.empty()) head += ' ';
      head += hex;
    }
  }
  throw Error("not a JPEG, PNG or WebP file (" + std::to_string(encoded.numel()) + " bytes" +
              (head.empty() ? std::string() : ", starting " + head) + "): the image decoder reads those three");
}

at::Tensor ImageDecoder::decode(const at::Tensor& encoded, const FieldSpec& spec) const {
  return decoder_for(encoded).decode(encoded, spec);
}

at::Tensor ImageDecoder::decode_sample(const at::Tensor& encoded, const FieldSpec& spec,
                                       const DecodeContext& context) const {
  return decoder_for(encoded).decode_sample(encoded, spec, context);
}

}  // namespace ferry
