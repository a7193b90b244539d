#include "ferry/io/formats/source_registry.h"

#include "ferry/io/formats/builtin_source_kinds.h"
#include "ferry/io/util/dataset_paths.h"
#include "ferry/pipeline/error.h"

namespace ferry {

SourceRegistry::SourceRegistry() {
  add(detail::synthetic_source_kind());
  add(detail::megatron_source_kind());
  add(detail::tokens_source_kind());
  add(detail::tar_source_kind());
  add(detail::jsonl_source_kind());
  add(detail::image_folder_source_kind());
  add(detail::python_source_kind());
  add(detail::mixture_source_kind());
}

SourceRegistry& SourceRegistry::global() {
  static SourceRegistry registry;
  return registry;
}

namespace {

// What a key's value says about the order, where a kind gives no order() of its own: a path as the file
// it names, anything else as written.
std::string order_text(const KeyValue& value, const KeySpec& spec) {
  if (spec.type == KeySpec::Type::kPath && value.is_scalar()) return detail::real_path(value.text());
  if (spec.type == KeySpec::Type::kList && !spec.item.empty() && spec.item.front().type == KeySpec::Type::kPath &&
      value.is_list()) {
    std::string paths;
    for (const KeyValue& item : value.items()) paths += detail::real_path(item.text()) + ";";
    return paths;
  }
  return value.yaml();
}

}  // namespace

std::pair<std::shared_ptr<const SourceKind>, KeyValue> source_kind_of(const KeyValue& source) {
  const std::string name = source.text_or("kind", "");
  std::shared_ptr<const SourceKind> kind = SourceRegistry::global().find(name);
  if (!kind) {
    std::string known;
    for (const std::string& each : SourceRegistry::global().names()) known += (known.empty() ? "" : ", ") + each;
    throw Error("unknown source kind '" + name + "' (registered: " + known + ")");
  }
  std::vector<std::pair<std::string, KeyValue>> keys;
  for (const auto& entry : source.entries()) {
    if (entry.first != "kind") keys.push_back(entry);
  }
  return {std::move(kind), KeyValue::mapping(std::move(keys), source.key(), source.where())};
}

std::shared_ptr<const Source> make_source_of(const SourceKind& kind, const KeyValue& keys, const MakeContext& context) {
  std::shared_ptr<const Source> made = kind.make ? kind.make(keys) : kind.make_in(keys, context);
  if (!made) throw Error("source kind '" + kind.name + "' made no source (null)");
  return made;
}

std::map<std::string, std::string> source_order(const SourceKind& kind, const KeyValue& keys, const Source& made) {
  if (kind.order) return kind.order(keys, made);
  std::map<std::string, std::string> order;
  for (const auto& [name, value] : keys.entries()) {
    if (const KeySpec* spec = [&]() -> const KeySpec* {
          for (const KeySpec& key : kind.keys) {
            if (key.name == name) return &key;
          }
          return nullptr;
        }()) {
      order["source." + name] = order_text(value, *spec);
    }
  }
  return order;
}

}  // namespace ferry
