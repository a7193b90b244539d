#include "ferry/io/util/key_schema.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "ferry/io/util/units.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

// A bound as written in docs and messages: 65535, not 65535.000000; 2^62 as 4611686018427387904.
std::string bound_text(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e19) {
    std::ostringstream out;
    out.precision(0);
    out << std::fixed << value;
    return out.str();
  }
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string range_text(const KeySpec& spec, std::string_view noun) {
  std::string text(noun);
  if (spec.min && spec.max) return text + " in " + bound_text(*spec.min) + ".." + bound_text(*spec.max);
  if (spec.min) return text + " >= " + bound_text(*spec.min);
  if (spec.max) return text + " <= " + bound_text(*spec.max);
  return text;
}

std::string choices_text(const std::vector<std::string>& choices) {
  std::string text;
  for (const std::string& choice : choices) text += (text.empty() ? "" : ", ") + choice;
  return text;
}

// YAML flow text of a scalar: quoted where it would not read back as the same text.
std::string yaml_scalar(const std::string& text) {
  const bool plain = !text.empty() && text.find_first_of(":#,[]{}&*!|>'\"%@`\n") == std::string::npos &&
                     text.front() != ' ' && text.back() != ' ' && text.front() != '-' && text.front() != '?';
  if (plain) return text;
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

std::string KeySpec::expected_text() const {
  if (!expected.empty()) return expected;
  switch (type) {
    case Type::kBoolean: return "true or false";
    case Type::kInteger: return range_text(*this, "an integer");
    case Type::kNumber: return range_text(*this, "a finite number");
    case Type::kString: return min && *min >= 1 ? "a non-empty text" : "a text";
    case Type::kPath: return "a path";
    case Type::kSize: return "a size such as 64MiB, 1.5GB or 4096";
    case Type::kChoice: return "one of " + choices_text(choices);
    case Type::kDecoder: return "a decoder name";
    case Type::kList: {
      const std::string element = item.empty() ? "values" : item.front().type_description();
      return std::string(min && *min >= 1 ? "a non-empty list" : "a list") + " of " + element;
    }
    case Type::kMapping: {
      std::string names;
      for (const KeySpec& key : keys) names += (names.empty() ? "" : ", ") + key.name;
      return "a mapping of keys (" + names + ")";
    }
    case Type::kAny: return "a value";
    case Type::kSource: return "a source mapping (kind and its keys)";
  }
  return "a value";
}

std::string KeySpec::type_description() const {
  if (!type_text.empty()) return type_text;
  switch (type) {
    case Type::kBoolean: return "boolean";
    case Type::kInteger: return range_text(*this, "integer");
    case Type::kNumber: return range_text(*this, "number");
    case Type::kString: return "string";
    case Type::kPath: return "path";
    case Type::kSize: return "size";
    case Type::kChoice: return "one of: " + choices_text(choices);
    case Type::kDecoder: return "decoder name";
    case Type::kList: {
      const std::string element = item.empty() ? "values" : item.front().type_description();
      return (one_or_list ? element + " or list of " : "list of ") + element;
    }
    case Type::kMapping: return "mapping";
    case Type::kAny: return "any value";
    case Type::kSource: return "source";
  }
  return "value";
}

const KeySpec* KeySpec::find(std::string_view key) const {
  for (const KeySpec& spec : keys) {
    if (spec.name == key) return &spec;
  }
  return nullptr;
}

KeyValue KeyValue::scalar(std::string text, std::string key, std::string where) {
  KeyValue value;
  value.kind_ = Kind::kScalar;
  value.text_ = std::move(text);
  value.key_ = std::move(key);
  value.where_ = std::move(where);
  return value;
}

KeyValue KeyValue::list(std::vector<KeyValue> items, std::string key, std::string where) {
  KeyValue value;
  value.kind_ = Kind::kList;
  value.items_ = std::move(items);
  value.key_ = std::move(key);
  value.where_ = std::move(where);
  return value;
}

KeyValue KeyValue::mapping(std::vector<std::pair<std::string, KeyValue>> entries, std::string key, std::string where) {
  KeyValue value;
  value.kind_ = Kind::kMapping;
  value.entries_ = std::move(entries);
  value.key_ = std::move(key);
  value.where_ = std::move(where);
  return value;
}

void KeyValue::wrong(std::string_view what) const {
  const std::string found = kind_ == Kind::kScalar ? "'" + text_ + "'" : kind_ == Kind::kList ? "a list" : "a mapping";
  throw Error((key_.empty() ? std::string("a config value") : key_) + ": expected " + std::string(what) + ", found " +
              found);
}

const std::string& KeyValue::text() const {
  if (kind_ != Kind::kScalar) wrong("a scalar");
  return text_;
}

bool KeyValue::boolean() const {
  const std::string& t = text();
  if (t == "true" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "no" || t == "off") return false;
  wrong("true or false");
}

int64_t KeyValue::integer() const {
  const std::string& t = text();
  int64_t value = 0;
  const auto [end, error] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (error != std::errc() || end != t.data() + t.size()) wrong("an integer");
  return value;
}

uint64_t KeyValue::unsigned_integer() const {
  const std::string& t = text();
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (error != std::errc() || end != t.data() + t.size()) wrong("an integer >= 0");
  return value;
}

double KeyValue::number() const {
  std::string_view t = text();
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  double value = 0;
  const auto [end, error] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (error != std::errc() || end != t.data() + t.size() || !std::isfinite(value)) wrong("a finite number");
  return value;
}

uint64_t KeyValue::bytes() const {
  const std::optional<uint64_t> value = parse_byte_size(text());
  if (!value) wrong("a size such as 64MiB");
  return *value;
}

const std::vector<KeyValue>& KeyValue::items() const {
  if (kind_ != Kind::kList) wrong("a list");
  return items_;
}

const KeyValue* KeyValue::find(std::string_view name) const noexcept {
  for (const auto& [key, value] : entries_) {
    if (key == name) return &value;
  }
  return nullptr;
}

const KeyValue& KeyValue::at(std::string_view name) const {
  if (const KeyValue* value = find(name)) return *value;
  throw Error((key_.empty() ? std::string() : key_ + ".") + std::string(name) + ": missing required key");
}

std::string KeyValue::text_or(std::string_view name, std::string fallback) const {
  const KeyValue* value = find(name);
  return value != nullptr ? value->text() : std::move(fallback);
}
bool KeyValue::boolean_or(std::string_view name, bool fallback) const {
  return or_else(name, fallback, &KeyValue::boolean);
}
int64_t KeyValue::integer_or(std::string_view name, int64_t fallback) const {
  return or_else(name, fallback, &KeyValue::integer);
}
uint64_t KeyValue::unsigned_or(std::string_view name, uint64_t fallback) const {
  return or_else(name, fallback, &KeyValue::unsigned_integer);
}
double KeyValue::number_or(std::string_view name, double fallback) const {
  return or_else(name, fallback, &KeyValue::number);
}
uint64_t KeyValue::bytes_or(std::string_view name, uint64_t fallback) const {
  return or_else(name, fallback, &KeyValue::bytes);
}

std::string KeyValue::yaml() const {
  switch (kind_) {
    case Kind::kScalar: return yaml_scalar(text_);
    case Kind::kList: {
      std::string text = "[";
      for (size_t i = 0; i < items_.size(); ++i) text += (i ? ", " : "") + items_[i].yaml();
      return text + "]";
    }
    case Kind::kMapping: {
      std::string text = "{";
      for (size_t i = 0; i < entries_.size(); ++i) {
        text += (i ? ", " : "") + yaml_scalar(entries_[i].first) + ": " + entries_[i].second.yaml();
      }
      return text + "}";
    }
  }
  return "";
}

void KeyProblems::add(const KeyValue& value, std::string message) {
  problems_.push_back({value.key(), value.where(), std::move(message)});
}

void KeyProblems::add(const std::string& key, const KeyValue& near, std::string message) {
  problems_.push_back({key, near.where(), std::move(message)});
}

namespace detail {

void check_key_specs(const std::vector<KeySpec>& keys, const std::string& owner) {
  std::vector<std::string_view> seen;
  for (const KeySpec& key : keys) {
    if (key.name.empty()) throw Error(owner + ": a key has no name");
    for (const std::string_view name : seen) {
      if (name == key.name) throw Error(owner + ": key '" + key.name + "' is given twice");
    }
    seen.push_back(key.name);
    const std::string whose = owner + ", key '" + key.name + "'";
    if (key.type == KeySpec::Type::kList) {
      if (key.item.size() != 1) throw Error(whose + ": a list needs exactly one element spec (item)");
      if (key.item.front().type == KeySpec::Type::kMapping) check_key_specs(key.item.front().keys, whose);
    }
    if (key.type == KeySpec::Type::kChoice && key.choices.empty()) throw Error(whose + ": a choice needs choices");
    if (key.type == KeySpec::Type::kMapping) check_key_specs(key.keys, whose);
  }
}

}  // namespace detail
}  // namespace ferry
