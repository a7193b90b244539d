// The keys of ferry's extensions, read against their schemas: the source kind's (`source:`), the
// decoders' (in the mapping that names one), the transforms' (`transforms:`), and `plugins:`, which may
// add all three. Nothing here knows a kind, a decoder or a transform by name.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "ferry/assembly/config_reader.h"
#include "ferry/assembly/plugin.h"
#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/formats/source_registry.h"
#include "ferry/io/transforms/transform_registry.h"
#include "ferry/io/util/units.h"

namespace ferry::detail {
namespace {

std::string join_path(const std::string& parent, std::string_view name) {
  return parent.empty() ? std::string(name) : parent + "." + std::string(name);
}

bool has_key(const std::vector<KeySpec>& keys, std::string_view name) {
  return std::any_of(keys.begin(), keys.end(), [&](const KeySpec& key) { return key.name == name; });
}

std::vector<std::string> key_names(const std::vector<KeySpec>& keys) {
  std::vector<std::string> names;
  for (const KeySpec& key : keys) names.push_back(key.name);
  return names;
}

// Whether `value` lies within the spec's bounds (whole-number bounds compared exactly).
template <typename Integer>
bool within(Integer value, const KeySpec& spec) {
  if (spec.min && static_cast<long double>(value) < static_cast<long double>(*spec.min)) return false;
  if (spec.max && static_cast<long double>(value) > static_cast<long double>(*spec.max)) return false;
  return true;
}

}  // namespace

std::optional<KeyValue> ConfigReader::read_integer(const Node& node, const std::string& key, const KeySpec& spec) {
  const std::string what = spec.expected_text();
  const auto text = scalar(node, key, what);
  if (!text) return std::nullopt;
  const char* begin = text->data();
  const char* end = begin + text->size();
  bool ok = false;
  if (!text->empty() && text->front() == '-') {
    int64_t value = 0;
    const auto [stop, error] = std::from_chars(begin, end, value);
    ok = error == std::errc() && stop == end && within(value, spec);
  } else {
    uint64_t value = 0;
    const auto [stop, error] = std::from_chars(begin, end, value);
    ok = error == std::errc() && stop == end && within(value, spec);
  }
  if (!ok) {
    expected(key, node, what);
    return std::nullopt;
  }
  return KeyValue::scalar(*text, key, location(key, node));
}

KeyValue ConfigReader::read_any(const Node& node, const std::string& key) {
  note(key, node);
  if (node.IsSequence()) {
    std::vector<KeyValue> items;
    for (size_t i = 0; i < node.size(); ++i) items.push_back(read_any(node[i], key + "[" + std::to_string(i) + "]"));
    return KeyValue::list(std::move(items), key, location(key, node));
  }
  if (node.IsMap()) {
    std::vector<std::pair<std::string, KeyValue>> entries;
    for (const auto& entry : node) {
      const std::string name = entry.first.Scalar();
      entries.emplace_back(name, read_any(entry.second, key + "." + name));
    }
    return KeyValue::mapping(std::move(entries), key, location(key, node));
  }
  return KeyValue::scalar(node.IsNull() ? "null" : node.Scalar(), key, location(key, node));
}

std::optional<KeyValue> ConfigReader::read_keyed(const Node& node, const std::string& key, const KeySpec& spec) {
  using Type = KeySpec::Type;
  const std::string what = spec.expected_text();
  const auto scalar_value = [&](const std::string& text) { return KeyValue::scalar(text, key, location(key, node)); };
  if (spec.nullable && node.IsNull()) {
    note(key, node);
    return scalar_value("null");
  }
  switch (spec.type) {
    case Type::kBoolean: {
      if (!boolean(node, key)) return std::nullopt;
      return scalar_value(node.Scalar());
    }
    case Type::kInteger: return read_integer(node, key, spec);
    case Type::kNumber: {
      const auto value = number(node, key);
      if (!value) return std::nullopt;
      if ((spec.min && *value < *spec.min) || (spec.max && *value > *spec.max)) {
        expected(key, node, what);
        return std::nullopt;
      }
      return scalar_value(node.Scalar());
    }
    case Type::kString:
    case Type::kPath: {
      const auto text = scalar(node, key, what);
      if (!text) return std::nullopt;
      if ((spec.min && static_cast<double>(text->size()) < *spec.min) ||
          (spec.max && static_cast<double>(text->size()) > *spec.max)) {
        expected(key, node, what);
        return std::nullopt;
      }
      return scalar_value(*text);
    }
    case Type::kSize: {
      const auto bytes = size(node, key, spec.min ? static_cast<uint64_t>(*spec.min) : 0, what);
      if (!bytes) return std::nullopt;
      if (spec.max && static_cast<double>(*bytes) > *spec.max) {
        expected(key, node, what);
        return std::nullopt;
      }
      return scalar_value(node.Scalar());
    }
    case Type::kChoice: {
      const auto text = choice(node, key, spec.choices);
      if (!text) return std::nullopt;
      return scalar_value(*text);
    }
    case Type::kDecoder: {
      const auto name = decoder_name(node, key);
      if (!name) return std::nullopt;
      return scalar_value(*name);
    }
    case Type::kList: {
      const KeySpec& item = spec.item.front();
      if (node.IsScalar() && spec.one_or_list) {
        // A list of one, written as its element: the element's problems are the key's own.
        auto element = read_keyed(node, key, item);
        if (!element) return std::nullopt;
        return KeyValue::list({std::move(*element)}, key, location(key, node));
      }
      if (!node.IsSequence() || (spec.min && static_cast<double>(node.size()) < *spec.min) ||
          (spec.max && static_cast<double>(node.size()) > *spec.max)) {
        expected(key, node, what);
        return std::nullopt;
      }
      note(key, node);
      std::vector<KeyValue> items;
      bool ok = true;
      for (size_t i = 0; i < node.size(); ++i) {
        auto element = read_keyed(node[i], key + "[" + std::to_string(i) + "]", item);
        if (element) {
          items.push_back(std::move(*element));
        } else {
          ok = false;
        }
      }
      if (!ok) return std::nullopt;
      return KeyValue::list(std::move(items), key, location(key, node));
    }
    case Type::kMapping: return read_keyed_mapping(node, key, spec.keys);
    case Type::kAny: return read_any(node, key);
    case Type::kSource: return read_source_mapping(node, key);
  }
  return std::nullopt;
}

std::optional<KeyValue> ConfigReader::read_keyed_mapping(
    const Node& node, const std::string& key, const std::vector<KeySpec>& keys, const std::vector<std::string>& extra,
    const std::function<std::optional<std::string>(const std::string& name)>& foreign) {
  // The decoder this mapping names, if one of its keys is a decoder: its keys join the mapping's.
  const auto named =
      std::find_if(keys.begin(), keys.end(), [](const KeySpec& spec) { return spec.type == KeySpec::Type::kDecoder; });
  std::string decoder_name;
  std::shared_ptr<const DecoderKind> decoder;
  if (named != keys.end()) {
    const auto given = child(node, named->name);
    decoder_name = given && given->IsScalar() ? given->Scalar() : named->default_value;
    decoder = DecoderRegistry::global().kind(decoder_name);
  }
  std::vector<KeySpec> all = keys;
  if (decoder) {
    for (const KeySpec& spec : decoder->keys) {
      if (!has_key(all, spec.name)) all.push_back(spec);
    }
  }
  std::vector<std::string> known = extra;
  for (const std::string& name : key_names(all)) known.push_back(name);
  if (!node.IsMap()) {
    expected(key, node, "a mapping of keys (" + list_text(known) + ")");
    return std::nullopt;
  }
  note(key, node);

  bool ok = true;
  std::vector<std::pair<std::string, KeyValue>> entries;
  std::map<std::string, YAML::Mark> seen;
  for (const auto& entry : node) {
    const Node& name_node = entry.first;
    const std::string name = name_node.IsScalar() ? name_node.Scalar() : found_text(name_node);
    const std::string path = join_path(key, name);
    if (given_twice(seen, name, name_node, path)) continue;
    if (std::find(extra.begin(), extra.end(), name) != extra.end()) continue;
    const auto spec = std::find_if(all.begin(), all.end(), [&](const KeySpec& s) { return s.name == name; });
    if (spec != all.end()) {
      if (auto value = read_keyed(entry.second, path, *spec)) {
        entries.emplace_back(name, std::move(*value));
      } else {
        ok = false;
      }
      continue;
    }
    std::optional<std::string> message = foreign ? foreign(name) : std::nullopt;
    const Node* at = &name_node;  // an unknown key at the key; another decoder's at its value
    if (!message && named != keys.end()) {
      // Another decoder's key: say whose, and how to get it.
      std::vector<std::string> takers;
      for (const auto& other : DecoderRegistry::global().kinds()) {
        if (has_key(other->keys, name)) takers.push_back(other->name);
      }
      if (!takers.empty()) {
        message = name + " is a key of the " + (takers.size() == 1 ? "decoder " : "decoders ") + list_text(takers) +
                  "; this field's decoder is '" + decoder_name + "' (set decoder: " + takers.front() + ", or remove " +
                  name + ")";
        at = &entry.second;
      }
    }
    if (!message) {
      message = "unknown key" + did_you_mean(name, known) + "; known " +
                (key.empty() ? std::string("at the top level") : "in " + key) + ": " + list_text(known);
    }
    problems_.push_back({location(path, *at), path, std::move(*message)});
  }
  for (const KeySpec& spec : all) {
    if (spec.required && !child(node, spec.name)) {
      problem(join_path(key, spec.name), node,
              "missing required key" + (spec.missing.empty() ? std::string() : " (" + spec.missing + ")"));
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  KeyValue value = KeyValue::mapping(std::move(entries), key, location(key, node));
  if (decoder && decoder->check) {
    KeyProblems found;
    try {
      decoder->check(value, found);
    } catch (const std::exception& e) {
      problem(key, node, "decoder '" + decoder_name + "': " + cause_of(e));
    }
    add(found);
  }
  return value;
}

void ConfigReader::read_plugins(const Node& node) {
  const KeySpec paths{.name = "plugins",
                      .type = KeySpec::Type::kList,
                      .item = {{.type = KeySpec::Type::kPath, .min = 1, .expected = "a path to a plugin (.so)"}},
                      .one_or_list = true,
                      .expected = "a path or a list of paths to plugins (.so)"};
  const std::optional<KeyValue> value = read_keyed(node, "plugins", paths);
  if (!value) return;
  for (const KeyValue& path : value->items()) {
    try {
      load_plugin(path.text());
      config_.plugins.push_back(path.text());
    } catch (const Error& e) {
      problems_.push_back({path.where(), path.key(), e.cause()});
    }
  }
}

std::optional<KeyValue> ConfigReader::read_source_mapping(const Node& node, const std::string& key) {
  const SourceRegistry& registry = SourceRegistry::global();
  const std::vector<std::string> kinds = registry.names();
  if (!node.IsMap()) {
    expected(key, node, "a mapping of keys (kind, and the kind's own)");
    return std::nullopt;
  }
  std::string name;
  if (const auto kind_node = child(node, "kind")) {
    const auto chosen = choice(*kind_node, key + ".kind", kinds);
    if (!chosen) return std::nullopt;
    name = *chosen;
  } else {
    // `kind` may be left out for a kind made of other sources, named by the key that holds them
    // (`source: {mix: [...]}`); any other source says its kind.
    const auto holds_sources = [](const KeySpec& spec) {
      return spec.type == KeySpec::Type::kSource ||
             (spec.type == KeySpec::Type::kList && !spec.item.empty() &&
              std::any_of(spec.item.front().keys.begin(), spec.item.front().keys.end(),
                          [](const KeySpec& inner) { return inner.type == KeySpec::Type::kSource; }));
    };
    std::vector<std::string> implied;
    for (const auto& kind : registry.kinds()) {
      for (const KeySpec& spec : kind->keys) {
        if (spec.required && holds_sources(spec) && child(node, spec.name)) {
          implied.push_back(kind->name);
          break;
        }
      }
    }
    if (implied.size() != 1) {
      problem(key + ".kind", node, "missing required key (one of: " + list_text(kinds) + ")");
      return std::nullopt;
    }
    name = implied.front();
  }
  const std::shared_ptr<const SourceKind> kind = registry.find(name);
  // Another kind's key is a mistake worth naming.
  std::vector<std::string> own{"kind"};
  for (const KeySpec& spec : kind->keys) own.push_back(spec.name);
  const auto foreign = [&](const std::string& other_key) -> std::optional<std::string> {
    for (const auto& other : registry.kinds()) {
      if (other->name != name && has_key(other->keys, other_key)) {
        return "not a key of source kind '" + name + "' (its keys: " + list_text(own) + ")";
      }
    }
    return std::nullopt;
  };
  std::optional<KeyValue> keys = read_keyed_mapping(node, key, kind->keys, {"kind"}, foreign);
  if (!keys) return std::nullopt;
  if (kind->check) {
    KeyProblems found;
    try {
      kind->check(*keys, found);
    } catch (const std::exception& e) {
      problem(key, node, "source kind '" + name + "': " + cause_of(e));
    }
    add(found);
  }
  std::vector<std::pair<std::string, KeyValue>> entries{
      {"kind", KeyValue::scalar(name, key + ".kind", location(key, node))}};
  for (const auto& entry : keys->entries()) entries.push_back(entry);
  return KeyValue::mapping(std::move(entries), key, location(key, node));
}

void ConfigReader::read_source(const Node& node) {
  const std::optional<KeyValue> read = read_source_mapping(node, "source");
  if (!read) return;
  auto [kind_made, keys] = source_kind_of(*read);
  config_.source.kind = kind_made->name;
  config_.source.keys = std::move(keys);
  source_read_ = true;
  // A field's `device: host` is collate.host's, said where the field is.
  if (kind_made->decoded_fields) {
    for (const DecodedField& field : kind_made->decoded_fields(config_.source.keys)) {
      const KeyValue* device = field.keys != nullptr ? field.keys->find("device") : nullptr;
      std::vector<std::string>& host = config_.pipeline.collate.host;
      if (device != nullptr && device->text() == "host" &&
          std::find(host.begin(), host.end(), field.name) == host.end()) {
        host.push_back(field.name);
      }
    }
  }
}

void ConfigReader::read_transforms(const Node& node) {
  const TransformRegistry& registry = TransformRegistry::global();
  const std::vector<std::string> names = registry.names();
  if (!node.IsSequence()) {
    expected("transforms", node, "a list of transforms, e.g. [{kind: drop, fields: [label]}]");
    return;
  }
  note("transforms", node);
  for (size_t i = 0; i < node.size(); ++i) {
    const Node entry = node[i];
    const std::string key = "transforms[" + std::to_string(i) + "]";
    if (!entry.IsMap()) {
      expected(key, entry, "a mapping with kind (one of: " + list_text(names) + ") and its keys");
      continue;
    }
    const auto kind_node = child(entry, "kind");
    if (!kind_node) {
      problem(key + ".kind", entry, "missing required key (one of: " + list_text(names) + ")");
      continue;
    }
    const auto name = choice(*kind_node, key + ".kind", names);
    if (!name) continue;
    const std::shared_ptr<const TransformKind> kind = registry.kind(*name);
    std::optional<KeyValue> keys = read_keyed_mapping(entry, key, kind->keys, {"kind"});
    if (!keys) continue;
    if (kind->check) {
      KeyProblems found;
      try {
        kind->check(*keys, found);
      } catch (const std::exception& e) {
        problem(key, entry, "transform '" + *name + "': " + cause_of(e));
      }
      add(found);
    }
    config_.transforms.push_back({*name, std::move(*keys)});
  }
}

}  // namespace ferry::detail
