#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/io/decoders/decoder.h"
#include "ferry/io/util/key_schema.h"
#include "ferry/io/util/kind_registry.h"

namespace ferry {

/// What a decoder kind's make() gets: the field it decodes and the keys the config gives it.
struct DecoderArgs {
  /// The field as the source declares it (its dtype and shape: an image decoder crops to [H, W]).
  const FieldSpec& field;
  /// The config's mapping that names the decoder (a tar member, an image folder's `image`): the
  /// decoder's own keys among the source's. An empty mapping where the config gives none.
  const KeyValue& keys;
  /// sampler.seed: random choices are drawn from (seed, epoch, sample) (DecodeContext).
  uint64_t seed = 0;
};

/// A decoder a config can name (`decoder: NAME` in a source's field mapping, decode.decoders), with
/// the keys it takes there: the image decoders' resize_shorter and crop, say. Like SourceKind, the
/// built-in decoders are registered kinds, and a program or a plugin adds its own the same way.
struct DecoderKind {
  std::string name;
  /// One paragraph: what goes in and comes out, for docs and `ferry info`.
  std::string description;
  /// Its keys, taken in the mapping that names it, beside the source's own keys there.
  std::vector<KeySpec> keys;
  /// Makes the decoder of one field (called once per field and pipeline, not per sample). Throws
  /// ferry::Error for a field it cannot decode into.
  std::function<std::shared_ptr<const Decoder>(const DecoderArgs& args)> make;
  /// Checks of the mapping that names it (its keys, and the source's: `dtype`, `shape`) that the schema
  /// cannot state, adding each problem; called by the config loader. Default: none.
  std::function<void(const KeyValue& field, KeyProblems& problems)> check;
  /// Where the kind comes from: "" for a built-in one, a plugin's path, or what the program says.
  std::string origin;
};

/// Decoders by name. Sources name a decoder per field; the decode stage resolves the names once,
/// when the pipeline is built, so a misspelt decoder fails before any thread starts.
/// Thread-safe: lookups share a lock, additions take it exclusively; nothing is ever removed.
class DecoderRegistry {
 public:
  /// A registry with the built-in decoders: raw, jpeg, png, webp, image (JPEG, PNG or WebP, by the
  /// bytes), npy, label, json, sentencepiece.
  DecoderRegistry();
  /// The process-wide registry that configs and make_pipeline() use; add your own decoders to it.
  static DecoderRegistry& global();

  /// Registers a kind. Throws ferry::Error for an empty name, no make, keys it cannot register, or a
  /// name already registered (saying by whom).
  void add(DecoderKind kind) { kinds_.add(std::move(kind)); }
  /// Registers one instance under its name(), with no keys: every field that names it shares it.
  void add(std::shared_ptr<const Decoder> decoder, std::string origin = "");
  /// Why add() would refuse `kind`, or nullopt.
  std::optional<std::string> refusal(const DecoderKind& kind) const { return kinds_.refusal(kind); }
  /// The kind, or nullptr.
  std::shared_ptr<const DecoderKind> kind(std::string_view name) const { return kinds_.find(name); }
  /// The decoder `name` makes for a field of no particular spec and no keys (the built-in "jpeg":
  /// no resize, no crop). Throws ferry::Error naming the unknown decoder and the registered ones.
  std::shared_ptr<const Decoder> find(std::string_view name) const;
  /// The decoder `name` makes for `args`. Throws like find(), or what the kind's make() throws.
  std::shared_ptr<const Decoder> make(std::string_view name, const DecoderArgs& args) const;
  /// Names in registration order (the built-in ones first).
  std::vector<std::string> names() const { return kinds_.names(); }
  std::vector<std::shared_ptr<const DecoderKind>> kinds() const { return kinds_.kinds(); }

  /// A kind of one shared instance (add(std::shared_ptr<const Decoder>)), for a plugin's registrar.
  static DecoderKind kind_of(std::shared_ptr<const Decoder> decoder, std::string origin = "");

 private:
  std::shared_ptr<const DecoderKind> require(std::string_view name) const;

  detail::KindRegistry<DecoderKind> kinds_{"decoder", ""};
};

}  // namespace ferry
