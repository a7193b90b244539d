#include "ferry/io/decoders/decoder_registry.h"

#include <mutex>

#include "ferry/io/decoders/image_decoder.h"
#include "ferry/io/decoders/jpeg_decoder.h"
#include "ferry/io/decoders/json_decoder.h"
#include "ferry/io/decoders/label_decoder.h"
#include "ferry/io/decoders/npy_decoder.h"
#include "ferry/io/decoders/png_decoder.h"
#include "ferry/io/decoders/raw_decoder.h"
#include "ferry/pipeline/error.h"

namespace ferry {

DecoderRegistry::DecoderRegistry() {
  decoders_.push_back(std::make_shared<RawDecoder>());
  decoders_.push_back(std::make_shared<JpegDecoder>());
  decoders_.push_back(std::make_shared<PngDecoder>());
  decoders_.push_back(std::make_shared<ImageDecoder>());
  decoders_.push_back(std::make_shared<NpyDecoder>());
  decoders_.push_back(std::make_shared<LabelDecoder>());
  decoders_.push_back(std::make_shared<JsonDecoder>());
}

DecoderRegistry& DecoderRegistry::global() {
  static DecoderRegistry registry;
  return registry;
}

void DecoderRegistry::add(std::shared_ptr<const Decoder> decoder) {
  if (!decoder) throw Error("cannot register a null decoder");
  std::unique_lock lock(mutex_);
  for (const auto& known : decoders_) {
    if (known->name() == decoder->name()) {
      throw Error("a decoder named '" + std::string(decoder->name()) + "' is already registered");
    }
  }
  decoders_.push_back(std::move(decoder));
}

std::shared_ptr<const Decoder> DecoderRegistry::find(std::string_view name) const {
  std::shared_lock lock(mutex_);
  for (const auto& decoder : decoders_) {
    if (decoder->name() == name) return decoder;
  }
  std::string known;
  for (const auto& decoder : decoders_) known += (known.empty() ? "" : ", ") + std::string(decoder->name());
  throw Error("unknown decoder '" + std::string(name) + "'; registered decoders: " + known);
}

std::vector<std::string> DecoderRegistry::names() const {
  std::shared_lock lock(mutex_);
  std::vector<std::string> names;
  for (const auto& decoder : decoders_) names.emplace_back(decoder->name());
  return names;
}

}  // namespace ferry
