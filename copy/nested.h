#pragma once

#include <any>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ferry {

/// A nested value as start_copy() takes and returns it, the C++ form of Python's nesting of
/// lists, tuples and dicts: None, a tensor, a list, a tuple, a dict (string keys, insertion order
/// kept, keys unique) or an opaque leaf (any other value, carried through unchanged).
///
///   Nested batch = Nested::dict({{"image", image}, {"meta", Nested::tuple({ids, Nested::opaque(7)})}});
///   batch["meta"][0].tensor();
///
/// A value type: copies share the tensors (as at::Tensor copies do) and copy the structure.
/// Accessors throw ferry::Error naming what was expected and found. Not thread-safe for writes;
/// concurrent reads are fine.
class Nested {
 public:
  enum class Kind { kNone, kTensor, kList, kTuple, kDict, kOpaque };
  using Item = std::pair<std::string, Nested>;

  /// None.
  Nested() = default;
  /// A tensor leaf (implicit, so that a tensor can stand wherever a Nested is expected).
  Nested(at::Tensor tensor);  // NOLINT(google-explicit-constructor)

  static Nested none() { return Nested(); }
  static Nested list(std::vector<Nested> elements = {});
  static Nested tuple(std::vector<Nested> elements = {});
  /// Throws ferry::Error on a repeated key.
  static Nested dict(std::vector<Item> items = {});
  static Nested opaque(std::any value);

  Kind kind() const noexcept { return kind_; }
  /// "None", "tensor", "list", "tuple", "dict" or "opaque".
  static const char* kind_name(Kind kind) noexcept;
  bool is_none() const noexcept { return kind_ == Kind::kNone; }
  bool is_tensor() const noexcept { return kind_ == Kind::kTensor; }
  bool is_list() const noexcept { return kind_ == Kind::kList; }
  bool is_tuple() const noexcept { return kind_ == Kind::kTuple; }
  bool is_dict() const noexcept { return kind_ == Kind::kDict; }
  bool is_opaque() const noexcept { return kind_ == Kind::kOpaque; }

  const at::Tensor& tensor() const;
  /// The elements of a list or tuple.
  const std::vector<Nested>& elements() const;
  /// The (key, value) pairs of a dict, in insertion order.
  const std::vector<Item>& items() const;
  const std::any& opaque_value() const;

  /// Elements of a list or tuple, items of a dict.
  size_t size() const;
  /// The element at `index` of a list or tuple.
  const Nested& operator[](size_t index) const;
  /// The value for `key` of a dict (throws when there is none).
  const Nested& operator[](std::string_view key) const;
  /// The value for `key` of a dict, or null when there is none.
  const Nested* find(std::string_view key) const;

  /// Appends to a list or tuple.
  Nested& append(Nested element);
  /// Adds `key` at the end of a dict, or replaces its value in place (order kept).
  Nested& set(std::string key, Nested value);

  /// Every tensor leaf, depth first in container order (the order TensorCopy gets them in).
  std::vector<at::Tensor> tensors() const;
  /// Where each tensor of tensors() sits, in Python's indexing syntax: "", "[2]", "['x'][0]".
  std::vector<std::string> tensor_paths() const;
  /// The same structure with the tensors of tensors() replaced, in that order, by `replacements`
  /// (throws ferry::Error when their count differs). Opaque leaves are shared, not copied.
  Nested with_tensors(const std::vector<at::Tensor>& replacements) const;

  /// A short, Python-like rendering for messages and tests: "[tensor(Float [2, 3] on cpu), None]".
  std::string repr() const;

 private:
  explicit Nested(Kind kind) : kind_(kind) {}
  void expect(Kind kind, const char* accessor) const;
  void collect(std::vector<at::Tensor>& out) const;
  void collect_paths(const std::string& prefix, std::vector<std::string>& out) const;
  Nested rebuilt(const std::vector<at::Tensor>& replacements, size_t& next) const;

  Kind kind_ = Kind::kNone;
  at::Tensor tensor_;
  std::vector<Nested> elements_;  // list, tuple
  std::vector<Item> items_;       // dict
  std::any opaque_;
};

}  // namespace ferry
