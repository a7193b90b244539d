#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ferry {

/// The ordered field names of a pipeline's batches, with a name -> position index. Built once per
/// pipeline and shared by all its batches, so that a batch of 10 000 fields costs no string work.
/// Immutable, hence thread-safe.
class BatchSchema {
 public:
  /// Throws ferry::Error on an empty or duplicate name.
  explicit BatchSchema(std::vector<std::string> names);

  const std::vector<std::string>& names() const noexcept { return names_; }
  size_t size() const noexcept { return names_.size(); }
  std::optional<size_t> find(std::string_view name) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> names_;
  std::unordered_map<std::string, size_t, Hash, std::equal_to<>> index_;
};

}  // namespace ferry
