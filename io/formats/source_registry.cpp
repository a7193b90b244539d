#include "ferry/io/formats/source_registry.h"

#include <mutex>

#include "ferry/io/formats/builtin_source_kinds.h"
#include "ferry/pipeline/error.h"

namespace ferry {

SourceRegistry::SourceRegistry() {
  add(detail::synthetic_source_kind());
  add(detail::megatron_source_kind());
  add(detail::tar_source_kind());
  add(detail::image_folder_source_kind());
}

SourceRegistry& SourceRegistry::global() {
  static SourceRegistry registry;
  return registry;
}

void SourceRegistry::add(SourceKind kind) {
  if (kind.name.empty()) throw Error("cannot register a source kind without a name");
  const std::string owner = "source kind '" + kind.name + "'";
  if (!kind.make) throw Error(owner + " has no make function");
  for (const KeySpec& key : kind.keys) {
    if (key.name == "kind") throw Error(owner + ": 'kind' is every kind's key; name the key otherwise");
  }
  detail::check_key_specs(kind.keys, owner);
  std::unique_lock lock(mutex_);
  for (const auto& known : kinds_) {
    if (known->name == kind.name) {
      throw Error("a source kind named '" + kind.name + "' is already registered" +
                  (known->origin.empty() ? " (built in)" : " (by " + known->origin + ")"));
    }
  }
  kinds_.push_back(std::make_shared<const SourceKind>(std::move(kind)));
}

std::shared_ptr<const SourceKind> SourceRegistry::find(std::string_view name) const {
  std::shared_lock lock(mutex_);
  for (const auto& kind : kinds_) {
    if (kind->name == name) return kind;
  }
  return nullptr;
}

std::vector<std::string> SourceRegistry::names() const {
  std::shared_lock lock(mutex_);
  std::vector<std::string> names;
  for (const auto& kind : kinds_) names.push_back(kind->name);
  return names;
}

std::vector<std::shared_ptr<const SourceKind>> SourceRegistry::kinds() const {
  std::shared_lock lock(mutex_);
  return kinds_;
}

}  // namespace ferry
