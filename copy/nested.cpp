#include "ferry/copy/nested.h"

#include <unordered_set>

#include "ferry/copy/tensor_copy.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

std::string quote_key(std::string_view key) {
  std::string text = "'";
  for (char c : key) {
    if (c == '\'' || c == '\\') text += '\\';
    text += c;
  }
  return text + "'";
}

}  // namespace

Nested::Nested(at::Tensor tensor) : kind_(Kind::kTensor), tensor_(std::move(tensor)) {}

Nested Nested::list(std::vector<Nested> elements) {
  Nested value(Kind::kList);
  value.elements_ = std::move(elements);
  return value;
}

Nested Nested::tuple(std::vector<Nested> elements) {
  Nested value(Kind::kTuple);
  value.elements_ = std::move(elements);
  return value;
}

Nested Nested::dict(std::vector<Item> items) {
  std::unordered_set<std::string_view> keys;
  keys.reserve(items.size());
  for (const Item& item : items) {
    if (!keys.insert(item.first).second) throw Error("a dict has the key " + quote_key(item.first) + " twice");
  }
  Nested value(Kind::kDict);
  value.items_ = std::move(items);
  return value;
}

Nested Nested::opaque(std::any value) {
  Nested nested(Kind::kOpaque);
  nested.opaque_ = std::move(value);
  return nested;
}

const char* Nested::kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kTensor: return "tensor";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kOpaque: return "opaque";
  }
  return "?";
}

void Nested::expect(Kind kind, const char* accessor) const {
  if (kind_ != kind)
    throw Error(std::string("Nested::") + accessor + "() on a " + kind_name(kind_) + ", not a " + kind_name(kind));
}

const at::Tensor& Nested::tensor() const {
  expect(Kind::kTensor, "tensor");
  return tensor_;
}

const std::vector<Nested>& Nested::elements() const {
  if (kind_ != Kind::kList && kind_ != Kind::kTuple) {
    throw Error(std::string("Nested::elements() on a ") + kind_name(kind_) + ", not a list or tuple");
  }
  return elements_;
}

const std::vector<Nested::Item>& Nested::items() const {
  expect(Kind::kDict, "items");
  return items_;
}

const std::any& Nested::opaque_value() const {
  expect(Kind::kOpaque, "opaque_value");
  return opaque_;
}

size_t Nested::size() const { return kind_ == Kind::kDict ? items_.size() : elements().size(); }

const Nested& Nested::operator[](size_t index) const {
  const std::vector<Nested>& all = elements();
  if (index >= all.size()) {
    throw Error("index " + std::to_string(index) + " is out of range for a " + kind_name(kind_) + " of " +
                std::to_string(all.size()));
  }
  return all[index];
}

const Nested& Nested::operator[](std::string_view key) const {
  const Nested* value = find(key);
  if (value == nullptr) throw Error("the dict has no key " + quote_key(key));
  return *value;
}

const Nested* Nested::find(std::string_view key) const {
  for (const Item& item : items()) {
    if (item.first == key) return &item.second;
  }
  return nullptr;
}

Nested& Nested::append(Nested element) {
  (void)elements();  // throws unless a list or tuple
  elements_.push_back(std::move(element));
  return *this;
}

Nested& Nested::set(std::string key, Nested value) {
  (void)items();  // throws unless a dict
  for (Item& item : items_) {
    if (item.first == key) {
      item.second = std::move(value);
      return *this;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
  return *this;
}

void Nested::collect(std::vector<at::Tensor>& out) const {
  switch (kind_) {
    case Kind::kTensor: out.push_back(tensor_); break;
    case Kind::kList:
    case Kind::kTuple:
      for (const Nested& element : elements_) element.collect(out);
      break;
    case Kind::kDict:
      for (const Item& item : items_) item.second.collect(out);
      break;
    case Kind::kNone:
    case Kind::kOpaque: break;
  }
}

std::vector<at::Tensor> Nested::tensors() const {
  std::vector<at::Tensor> out;
  collect(out);
  return out;
}

void Nested::collect_paths(const std::string& prefix, std::vector<std::string>& out) const {
  switch (kind_) {
    case Kind::kTensor: out.push_back(prefix); break;
    case Kind::kList:
    case Kind::kTuple:
      for (size_t i = 0; i < elements_.size(); ++i) {
        elements_[i].collect_paths(prefix + "[" + std::to_string(i) + "]", out);
      }
      break;
    case Kind::kDict:
      for (const Item& item : items_) item.second.collect_paths(prefix + "[" + quote_key(item.first) + "]", out);
      break;
    case Kind::kNone:
    case Kind::kOpaque: break;
  }
}

std::vector<std::string> Nested::tensor_paths() const {
  std::vector<std::string> out;
  collect_paths("", out);
  return out;
}

Nested Nested::rebuilt(const std::vector<at::Tensor>& replacements, size_t& next) const {
  switch (kind_) {
    case Kind::kTensor:
      if (next >= replacements.size()) break;  // reported by with_tensors()
      return Nested(replacements[next++]);
    case Kind::kList:
    case Kind::kTuple: {
      Nested value(kind_);
      value.elements_.reserve(elements_.size());
      for (const Nested& element : elements_) value.elements_.push_back(element.rebuilt(replacements, next));
      return value;
    }
    case Kind::kDict: {
      Nested value(kind_);
      value.items_.reserve(items_.size());
      for (const Item& item : items_) value.items_.emplace_back(item.first, item.second.rebuilt(replacements, next));
      return value;
    }
    case Kind::kNone:
    case Kind::kOpaque: break;
  }
  return *this;
}

Nested Nested::with_tensors(const std::vector<at::Tensor>& replacements) const {
  size_t next = 0;
  Nested value = rebuilt(replacements, next);
  const size_t count = tensors().size();
  if (next != count || replacements.size() != count) {
    throw Error("the structure holds " + std::to_string(count) + " tensors but " + std::to_string(replacements.size()) +
                " replacements were given");
  }
  return value;
}

std::string Nested::repr() const {
  switch (kind_) {
    case Kind::kNone: return "None";
    case Kind::kTensor: return "tensor(" + describe_tensor(tensor_) + ")";
    case Kind::kOpaque: return std::string("<opaque ") + (opaque_.has_value() ? opaque_.type().name() : "empty") + ">";
    case Kind::kList:
    case Kind::kTuple: {
      const bool list = kind_ == Kind::kList;
      std::string text = list ? "[" : "(";
      for (size_t i = 0; i < elements_.size(); ++i) text += (i == 0 ? "" : ", ") + elements_[i].repr();
      if (!list && elements_.size() == 1) text += ",";
      return text + (list ? "]" : ")");
    }
    case Kind::kDict: {
      std::string text = "{";
      for (size_t i = 0; i < items_.size(); ++i) {
        text += (i == 0 ? "" : ", ") + quote_key(items_[i].first) + ": " + items_[i].second.repr();
      }
      return text + "}";
    }
  }
  return "?";
}

}  // namespace ferry
