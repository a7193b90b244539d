#pragma once

#include <cstddef>
#include <iterator>
#include <optional>

namespace ferry {

/// Single-pass input iterator over what `owner->next()` returns (a std::optional<Item>) until it returns
/// nullopt: Pipeline's batches, PipelineGroup's steps. ++ calls next() (and may throw).
template <typename Owner, typename Item>
class NextIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Item;
  using difference_type = std::ptrdiff_t;
  using pointer = const Item*;
  using reference = const Item&;

  NextIterator() = default;
  explicit NextIterator(Owner* owner) : owner_(owner) { advance(); }
  reference operator*() const { return *current_; }
  pointer operator->() const { return &*current_; }
  NextIterator& operator++() {
    advance();
    return *this;
  }
  bool operator==(const NextIterator& other) const noexcept { return owner_ == other.owner_; }

 private:
  void advance() {
    current_ = owner_->next();
    if (!current_) owner_ = nullptr;
  }
  Owner* owner_ = nullptr;  // null: the end
  std::optional<Item> current_;
};

}  // namespace ferry
