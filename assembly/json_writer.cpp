#include "ferry/assembly/json_writer.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

#include "ferry/pipeline/utf8.h"

namespace ferry {

JsonWriter::JsonWriter(std::ostream& out, int indent) : out_(out), indent_(indent < 0 ? 0 : indent) {}

std::string JsonWriter::quote(std::string_view text) {
  std::string quoted;
  quoted.reserve(text.size() + 2);
  quoted.push_back('"');
  detail::append_json_escaped(quoted, text, detail::InvalidUtf8::kReplacement);
  quoted.push_back('"');
  return quoted;
}

void JsonWriter::newline_and_indent() {
  if (indent_ == 0) return;
  out_ << '\n';
  for (size_t i = 0; i < levels_.size() * static_cast<size_t>(indent_); ++i) out_ << ' ';
}

void JsonWriter::before_value(const char* what) {
  if (done_) throw std::logic_error(std::string("JsonWriter: ") + what + " after the document ended");
  if (levels_.empty()) return;
  Level& level = levels_.back();
  if (level.scope == Scope::kObject) {
    if (!key_pending_) throw std::logic_error(std::string("JsonWriter: ") + what + " in an object needs a key first");
    key_pending_ = false;
    return;  // key() wrote the separator and indentation
  }
  if (!level.empty) out_ << ',';
  level.empty = false;
  newline_and_indent();
}

void JsonWriter::after_value() {
  if (levels_.empty()) done_ = true;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  if (levels_.empty() || levels_.back().scope != Scope::kObject) {
    throw std::logic_error("JsonWriter: key outside an object");
  }
  if (key_pending_) throw std::logic_error("JsonWriter: two keys in a row");
  Level& level = levels_.back();
  if (!level.empty) out_ << ',';
  level.empty = false;
  newline_and_indent();
  out_ << quote(name) << (indent_ == 0 ? ":" : ": ");
  key_pending_ = true;
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value("an object");
  out_ << '{';
  levels_.push_back(Level{Scope::kObject});
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value("an array");
  out_ << '[';
  levels_.push_back(Level{Scope::kArray});
  return *this;
}

JsonWriter& JsonWriter::end(Scope scope, char close) {
  if (levels_.empty() || levels_.back().scope != scope) {
    throw std::logic_error(std::string("JsonWriter: '") + close + "' does not match what is open");
  }
  if (key_pending_) throw std::logic_error("JsonWriter: a key without its value");
  const bool empty = levels_.back().empty;
  levels_.pop_back();
  if (!empty) newline_and_indent();
  out_ << close;
  after_value();
  return *this;
}

JsonWriter& JsonWriter::end_object() { return end(Scope::kObject, '}'); }
JsonWriter& JsonWriter::end_array() { return end(Scope::kArray, ']'); }

JsonWriter& JsonWriter::value(std::string_view text) {
  before_value("a string");
  out_ << quote(text);
  after_value();
  return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
  before_value("a boolean");
  out_ << (flag ? "true" : "false");
  after_value();
  return *this;
}

JsonWriter& JsonWriter::value(double number) {
  if (!std::isfinite(number)) return null();
  // Shortest round-trip form; its syntax ("1e-05", "-0", "3") is valid JSON for finite values.
  char text[32];
  const auto result = std::to_chars(text, text + sizeof text, number);
  return number_text(std::string_view(text, static_cast<size_t>(result.ptr - text)));
}

JsonWriter& JsonWriter::number_text(std::string_view text) {
  before_value("a number");
  out_.write(text.data(), static_cast<std::streamsize>(text.size()));
  after_value();
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value("null");
  out_ << "null";
  after_value();
  return *this;
}

}  // namespace ferry
