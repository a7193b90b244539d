#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry {

/// One key that a source kind, a decoder or a sample transform takes in a config (its schema entry).
/// The config loader checks every value against it (type, range, required, unknown keys with the
/// nearest known one), `ferry info` and docs/config.md describe the key from it, and the extension's
/// factory reads the checked value as a KeyValue: one home for each fact about a key.
///
///   KeySpec{.name = "seq_len", .type = KeySpec::Type::kInteger, .description = "Tokens per sequence.",
///           .default_value = "2048", .example = "4096", .min = 1, .max = 1 << 30}
struct KeySpec {
  enum class Type {
    kBoolean,  // true/false (also yes/no, on/off)
    kInteger,  // a whole number within [min, max] (bounds optional)
    kNumber,   // a finite number within [min, max]
    kString,   // any text; min and max bound its length (min 1: not empty)
    kPath,     // a local path, as text
    kSize,     // a byte count with units ("64MiB"), within [min, max] bytes
    kChoice,   // one of `choices`
    kDecoder,  // a registered decoder's name; the mapping holding it also takes that decoder's keys
    kList,     // a list of `item`s; min/max bound its length
    kMapping,  // a mapping of `keys`
    kAny,      // any YAML value (scalar, list, mapping), passed on as written: the extension reads it
    kSource,   // a source: `kind` and that kind's keys, checked as `source:` is (a mixture's parts)
  };

  std::string name;
  Type type = Type::kString;
  std::string description;
  /// As a user would write it, for docs ("2048", "none"); a required key's is "required".
  std::string default_value;
  bool required = false;
  /// A valid value, as YAML: docs show it, and a test sets it to check that the key is read.
  std::string example;
  std::optional<double> min;
  std::optional<double> max;
  std::vector<std::string> choices;  // kChoice
  std::vector<KeySpec> item;         // kList: one spec, its elements'
  std::vector<KeySpec> keys;         // kMapping: its keys, in documentation order
  /// kList: one element may stand for a list of one (`shards: a.tar` for `shards: [a.tar]`).
  bool one_or_list = false;
  /// YAML's null (`null`, `~`) is a value too, read back as KeyValue::is_null(): a shape's size that
  /// varies (`shape: [null, 4]`).
  bool nullable = false;
  /// What messages say was expected ("an integer in 1..65535 (pixels)"); empty: from the type.
  std::string expected;
  /// What the docs give as the type ("integer 1..65535"); empty: from the type.
  std::string type_text;
  /// For a required key: what it is, said when it is missing ("the folder holding ...").
  std::string missing;

  /// The "expected ..." text of messages: `expected` if set, else from the type and bounds.
  std::string expected_text() const;
  /// The type column of the docs: `type_text` if set, else from the type and bounds.
  std::string type_description() const;
  /// The key named `name` among `keys`, or nullptr.
  const KeySpec* find(std::string_view key) const;
};

/// A value of a config, read and checked against its KeySpec by the config loader (or built in code):
/// a scalar (its text as written), a list or a mapping. It knows its key path ("source.members[0].shape")
/// and where it was set ("train.yaml:12:5", "--set source.seq_len=9"), so that a factory's problems name
/// both. Immutable once built; thread-safe to read.
class KeyValue {
 public:
  enum class Kind { kScalar, kList, kMapping };

  KeyValue() = default;
  static KeyValue scalar(std::string text, std::string key = "", std::string where = "");
  static KeyValue list(std::vector<KeyValue> items, std::string key = "", std::string where = "");
  static KeyValue mapping(std::vector<std::pair<std::string, KeyValue>> entries, std::string key = "",
                          std::string where = "");

  Kind kind() const noexcept { return kind_; }
  bool is_scalar() const noexcept { return kind_ == Kind::kScalar; }
  bool is_list() const noexcept { return kind_ == Kind::kList; }
  bool is_mapping() const noexcept { return kind_ == Kind::kMapping; }
  /// YAML's null, where its KeySpec is nullable.
  bool is_null() const noexcept { return kind_ == Kind::kScalar && text_ == "null"; }
  /// The key path, for messages; "" when built in code without one.
  const std::string& key() const noexcept { return key_; }
  /// Where it was set: "file:line:column" or "--set key=value"; "" when unknown.
  const std::string& where() const noexcept { return where_; }

  /// A scalar as written. Each accessor below reads it as the type the loader checked; throws
  /// ferry::Error naming the key when it is not one (a value built in code, say).
  const std::string& text() const;
  bool boolean() const;
  int64_t integer() const;
  uint64_t unsigned_integer() const;
  double number() const;
  uint64_t bytes() const;  // a size: "64MiB" as 67108864

  /// A list's elements. Throws ferry::Error naming the key for a scalar or a mapping.
  const std::vector<KeyValue>& items() const;
  /// A mapping's entries, in the order they were written.
  const std::vector<std::pair<std::string, KeyValue>>& entries() const noexcept { return entries_; }
  /// A mapping's value under `name`, or nullptr.
  const KeyValue* find(std::string_view name) const noexcept;
  bool has(std::string_view name) const noexcept { return find(name) != nullptr; }
  /// A mapping's value under `name`; throws ferry::Error naming the key when it is absent.
  const KeyValue& at(std::string_view name) const;

  /// A mapping's scalar under `name` read as that type, or `fallback` when the key is absent.
  std::string text_or(std::string_view name, std::string fallback) const;
  bool boolean_or(std::string_view name, bool fallback) const;
  int64_t integer_or(std::string_view name, int64_t fallback) const;
  uint64_t unsigned_or(std::string_view name, uint64_t fallback) const;
  double number_or(std::string_view name, double fallback) const;
  uint64_t bytes_or(std::string_view name, uint64_t fallback) const;

  /// This value as YAML (flow style), for reports and the keys a saved state records.
  std::string yaml() const;

 private:
  [[noreturn]] void wrong(std::string_view what) const;
  /// The value under `name` read by `read`, or `fallback` when the key is absent.
  template <typename T>
  T or_else(std::string_view name, T fallback, T (KeyValue::*read)() const) const {
    const KeyValue* value = find(name);
    return value != nullptr ? (value->*read)() : fallback;
  }

  Kind kind_ = Kind::kMapping;
  std::string text_;
  std::vector<KeyValue> items_;
  std::vector<std::pair<std::string, KeyValue>> entries_;
  std::string key_;
  std::string where_;
};

/// A problem with a value, found by the extension that reads it: the config loader reports it at the
/// value's key and place, beside the problems it found itself.
struct KeyProblem {
  std::string key;    // "source.members[0].shape"
  std::string where;  // "train.yaml:5:18"; "" : the key's own place
  std::string message;
};

/// Where an extension's checks put the problems they find (each one, not just the first).
class KeyProblems {
 public:
  /// A problem at `value`'s key and place.
  void add(const KeyValue& value, std::string message);
  /// A problem at `key` (a path below a mapping that does not hold it: "source.image.shape" when the
  /// shape was not given), placed where `near` was set.
  void add(const std::string& key, const KeyValue& near, std::string message);
  const std::vector<KeyProblem>& list() const noexcept { return problems_; }
  bool empty() const noexcept { return problems_.empty(); }

 private:
  std::vector<KeyProblem> problems_;
};

namespace detail {
/// Throws ferry::Error for keys that an extension cannot register: an unnamed key, a key named twice,
/// a list without its element's spec, a choice without choices; at any depth. `owner` says whose keys
/// they are ("source kind 'csv'"). The registries call it on every addition.
void check_key_specs(const std::vector<KeySpec>& keys, const std::string& owner);
}  // namespace detail

}  // namespace ferry
