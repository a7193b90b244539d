#include "ferry/pipeline/batch_schema.h"

#include "ferry/pipeline/error.h"

namespace ferry {

BatchSchema::BatchSchema(std::vector<std::string> names) : names_(std::move(names)) {
  index_.reserve(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i].empty()) throw Error("batch field " + std::to_string(i) + " has an empty name");
    if (!index_.emplace(names_[i], i).second) throw Error("batch field name '" + names_[i] + "' appears twice");
  }
}

std::optional<size_t> BatchSchema::find(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

}  // namespace ferry
