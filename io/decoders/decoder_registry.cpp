#include "ferry/io/decoders/decoder_registry.h"

#include "ferry/io/decoders/builtin_decoder_kinds.h"
#include "ferry/io/decoders/label_decoder.h"
#include "ferry/io/decoders/npy_decoder.h"
#include "ferry/pipeline/error.h"

namespace ferry {

DecoderRegistry::DecoderRegistry() {
  add(detail::raw_decoder_kind());
  add(detail::jpeg_decoder_kind());
  add(detail::png_decoder_kind());
  add(detail::webp_decoder_kind());
  add(detail::image_decoder_kind());
  add(std::make_shared<NpyDecoder>());
  add(std::make_shared<LabelDecoder>());
  add(detail::json_decoder_kind());
  add(detail::sentencepiece_decoder_kind());
}

DecoderRegistry& DecoderRegistry::global() {
  static DecoderRegistry registry;
  return registry;
}

DecoderKind DecoderRegistry::kind_of(std::shared_ptr<const Decoder> decoder, std::string origin) {
  if (!decoder) throw Error("cannot register a null decoder");
  DecoderKind kind;
  kind.name = std::string(decoder->name());
  kind.make = [decoder](const DecoderArgs&) { return decoder; };
  kind.origin = std::move(origin);
  return kind;
}

void DecoderRegistry::add(std::shared_ptr<const Decoder> decoder, std::string origin) {
  add(kind_of(std::move(decoder), std::move(origin)));
}

std::shared_ptr<const DecoderKind> DecoderRegistry::require(std::string_view name) const {
  if (auto found = kind(name)) return found;
  std::string known;
  for (const std::string& registered : names()) known += (known.empty() ? "" : ", ") + registered;
  throw Error("unknown decoder '" + std::string(name) + "'; registered decoders: " + known);
}

std::shared_ptr<const Decoder> DecoderRegistry::find(std::string_view name) const {
  static const FieldSpec kAnyField;
  static const KeyValue kNoKeys = KeyValue::mapping({});
  return make(name, DecoderArgs{kAnyField, kNoKeys, 0});
}

std::shared_ptr<const Decoder> DecoderRegistry::make(std::string_view name, const DecoderArgs& args) const {
  const std::shared_ptr<const DecoderKind> found = require(name);
  std::shared_ptr<const Decoder> decoder = found->make(args);
  if (!decoder) throw Error("decoder '" + std::string(name) + "' made no decoder (null)");
  return decoder;
}

}  // namespace ferry
