#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/io/transforms/transform.h"
#include "ferry/io/util/key_schema.h"
#include "ferry/io/util/kind_registry.h"

namespace ferry {

/// A sample transform a config can name (`transforms: [{kind: NAME, ...}]`), with its keys. The
/// built-in ones (drop, rename, boxes) are registered like a program's or a plugin's own.
struct TransformKind {
  std::string name;
  /// One paragraph: what it does to a sample, for docs and `ferry info`.
  std::string description;
  /// Its keys, beside `kind`, in the transform's mapping.
  std::vector<KeySpec> keys;
  /// Makes the transform from its checked keys (once per pipeline). Throws ferry::Error for keys it
  /// cannot work with.
  std::function<std::shared_ptr<const Transform>(const KeyValue& keys)> make;
  /// Instead of make, for a transform that needs the run's settings beside its keys (MakeContext). A
  /// kind has one of the two.
  std::function<std::shared_ptr<const Transform>(const KeyValue& keys, const MakeContext& context)> make_in;
  /// Checks across its keys that the schema cannot state, adding each problem; called by the config
  /// loader. Default: none.
  std::function<void(const KeyValue& keys, KeyProblems& problems)> check;
  /// Where the kind comes from: "" for a built-in one, a plugin's path, or what the program says.
  std::string origin;
};

/// Sample transforms by name. Thread-safe: lookups share a lock, additions take it exclusively;
/// nothing is ever removed.
class TransformRegistry {
 public:
  /// A registry with the built-in transforms: drop, rename, boxes, python.
  TransformRegistry();
  /// The process-wide registry that configs use; add your own transforms to it.
  static TransformRegistry& global();

  /// Throws ferry::Error for an empty name, no make, keys it cannot register (or one named `kind`),
  /// or a name already registered (saying by whom).
  void add(TransformKind kind) { kinds_.add(std::move(kind)); }
  /// Why add() would refuse `kind`, or nullopt.
  std::optional<std::string> refusal(const TransformKind& kind) const { return kinds_.refusal(kind); }
  /// The kind, or nullptr.
  std::shared_ptr<const TransformKind> kind(std::string_view name) const { return kinds_.find(name); }
  /// The transform `name` makes from `keys`. Throws ferry::Error naming an unknown transform and the
  /// registered ones, or what the kind's make() throws.
  std::shared_ptr<const Transform> make(std::string_view name, const KeyValue& keys,
                                        const MakeContext& context = {}) const;
  /// Names in registration order (the built-in ones first).
  std::vector<std::string> names() const { return kinds_.names(); }
  std::vector<std::shared_ptr<const TransformKind>> kinds() const { return kinds_.kinds(); }

 private:
  detail::KindRegistry<TransformKind> kinds_{"transform", "kind"};
};

/// The fields a sample has after `transforms`, one after the other, given the decoded `fields`: what
/// collate and the pool are sized for. Throws ferry::Error naming the transform whose input does not
/// suit it, or whose output names a field twice.
std::vector<FieldSpec> transformed_fields(std::vector<FieldSpec> fields,
                                          const std::vector<std::shared_ptr<const Transform>>& transforms);

}  // namespace ferry
