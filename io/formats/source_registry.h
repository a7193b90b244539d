#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/io/formats/source.h"
#include "ferry/io/util/key_schema.h"
#include "ferry/io/util/kind_registry.h"

namespace ferry {

/// A field whose decoder a source's config names, with the mapping that names it: the decoder's own
/// keys (resize_shorter, crop, ...) are read from there. (A tar member, an image folder's image.)
struct DecodedField {
  std::string name;
  const KeyValue* keys = nullptr;  // the mapping holding `decoder` and the decoder's keys
  std::string decoder;             // the decoder it names (the kind's default where it names none)
};

/// A kind of source that a config names (`source: {kind: NAME, ...}`): its keys, its checks and how to
/// make it. Every built-in kind (synthetic, megatron, tokens, tar, image_folder, python) is one, registered in
/// SourceRegistry like a program's or a plugin's own: the config loader knows none of them by name.
///
/// Only `name`, `keys` and `make` (or `make_in`) are required; each hook is optional and says what it defaults to.
/// The hooks are called from the thread that loads or checks a config, never from a pipeline's threads.
struct SourceKind {
  std::string name;
  /// One paragraph: what the source reads, for docs and `ferry info`.
  std::string description;
  /// Its keys under `source:`, beside `kind` (which every kind takes).
  std::vector<KeySpec> keys;
  /// Makes the source from its checked keys (the `source` mapping). May read the data (index a
  /// dataset); throws ferry::Error for what only the data shows, reported at `error_key`.
  std::function<std::shared_ptr<const Source>(const KeyValue& source)> make;
  /// Instead of make, for a kind that needs the run's settings beside its keys (MakeContext: the seed,
  /// worker processes). A kind has one of the two.
  std::function<std::shared_ptr<const Source>(const KeyValue& source, const MakeContext& context)> make_in;

  /// Checks across keys that the schema cannot state (a file that must exist, min <= max), adding each
  /// problem found; called by the config loader after the schema's checks passed, before anything is
  /// made. Default: none.
  std::function<void(const KeyValue& source, KeyProblems& problems)> check;
  /// The fields the source will have, where its keys tell without reading data: per-field keys
  /// (decode.decoders.<field>, collate.pad_values.<field>) are checked against them at load time.
  /// Default: unknown until the source is made.
  std::function<std::vector<FieldSpec>(const KeyValue& source)> fields;
  /// The fields whose decoder the config names, with their mappings (see DecodedField). Default: none.
  std::function<std::vector<DecodedField>(const KeyValue& source)> decoded_fields;
  /// What decides which sample is which, as text per key ("source.seed" -> "7"), for the order a saved
  /// state records (a resume under another order is refused, naming the key). `made` is the source.
  /// Default: each key's value as written (source.<key>), a path as the absolute path it names.
  std::function<std::map<std::string, std::string>(const KeyValue& source, const Source& made)> order;
  /// Where to point a user whose source has a variable-length field `field` without a maximum (the
  /// largest batch, and so the slab size, is unknown): the key and the advice. Default: pool.slab_size.
  std::function<std::optional<KeyProblem>(const KeyValue& source, const std::string& field)> size_advice;
  /// The key where make()'s failures are reported ("source.root" for a folder's problems).
  std::string error_key = "source";
  /// The samples lie in shards best read in order: `sampler.shuffle_buffer` applies (Source::shards()).
  bool shards = false;
  /// Where the kind comes from: "" for a built-in one, a plugin's path, or what the program says.
  std::string origin;
};

/// Source kinds by name. The process-wide one, global(), holds the built-in kinds; a program or a
/// plugin adds its own. Thread-safe: lookups share a lock, additions take it exclusively; kinds are
/// never removed, so a looked-up kind stays valid.
class SourceRegistry {
 public:
  /// A registry with the built-in kinds: synthetic, megatron, tokens, tar, image_folder, python.
  SourceRegistry();
  static SourceRegistry& global();

  /// Throws ferry::Error for an empty name, a name already registered (saying by whom), no `make`, or a
  /// key named twice or named `kind`.
  void add(SourceKind kind) { kinds_.add(std::move(kind)); }
  /// Why add() would refuse `kind`, or nullopt.
  std::optional<std::string> refusal(const SourceKind& kind) const { return kinds_.refusal(kind); }
  /// The kind, or nullptr.
  std::shared_ptr<const SourceKind> find(std::string_view name) const { return kinds_.find(name); }
  /// Names in registration order (the built-in ones first).
  std::vector<std::string> names() const { return kinds_.names(); }
  std::vector<std::shared_ptr<const SourceKind>> kinds() const { return kinds_.kinds(); }

 private:
  detail::KindRegistry<SourceKind> kinds_{"source kind", "kind"};
};

/// A source mapping that names its kind among its keys (a mixture's part, as the config loader checked
/// it): the kind and the other keys. Throws ferry::Error for a kind that is not registered.
std::pair<std::shared_ptr<const SourceKind>, KeyValue> source_kind_of(const KeyValue& source);
/// The source `kind` makes of `keys` (its make or make_in); throws ferry::Error where it makes none.
std::shared_ptr<const Source> make_source_of(const SourceKind& kind, const KeyValue& keys, const MakeContext& context);
/// What decides which sample is which, as "source.<key>" entries: SourceKind::order, or each key as
/// written, a path as the absolute path it names (two spellings of one dataset are one order).
std::map<std::string, std::string> source_order(const SourceKind& kind, const KeyValue& keys, const Source& made);

}  // namespace ferry
