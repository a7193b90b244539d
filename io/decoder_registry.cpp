#include "io/decoder_registry.h"

#include <mutex>

#include "io/jpeg_decoder.h"
#include "io/json_decoder.h"
#include "io/label_decoder.h"
#include "io/npy_decoder.h"
#include "io/raw_decoder.h"
#include "pipeline/error.h"

namespace ferry {

DecoderRegistry::DecoderRegistry() {
  decoders_.push_back(std::make_shared<RawDecoder>());
  decoders_.push_back(std::make_shared<JpegDecoder>());
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
