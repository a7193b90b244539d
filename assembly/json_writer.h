#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

/// Writes one JSON document to a stream, indented, in the order the calls come (so a report's key
/// order is its code's order). No JSON library is available to ferry's command; this is the least
/// that writes valid JSON whatever the data:
///   * strings are escaped: quote, backslash and control characters (as \u00XX); bytes that are
///     not valid UTF-8 (a path on a Linux file system may hold any) become U+FFFD;
///   * numbers are written in the shortest form that reads back to the same double; NaN and
///     infinities, which JSON cannot hold, are written as null.
///
///   JsonWriter json(out);
///   json.begin_object().key("batches").value(20).key("device").value("cuda:0").end_object();
///
/// Misuse (a value without a key inside an object, a key outside one, unbalanced ends, a second
/// top-level value) throws std::logic_error: it is a bug in the caller, found by its tests.
/// Not thread-safe; allocates only for its nesting stack.
class JsonWriter {
 public:
  /// `indent` spaces per level; 0 writes everything on one line.
  explicit JsonWriter(std::ostream& out, int indent = 2);

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);

  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(bool flag);
  JsonWriter& value(double number);
  template <std::integral T>
  requires(!std::same_as<T, bool>) JsonWriter& value(T number) {
    char text[24];
    const auto result = std::to_chars(text, text + sizeof text, number);
    return number_text(std::string_view(text, static_cast<size_t>(result.ptr - text)));
  }
  JsonWriter& null();

  /// True once one complete top-level value has been written.
  bool done() const noexcept { return done_; }

  /// `text` as a JSON string literal, quotes included. Pure; thread-safe.
  static std::string quote(std::string_view text);

 private:
  enum class Scope { kObject, kArray };
  struct Level {
    Scope scope;
    bool empty = true;
  };

  void before_value(const char* what);
  void after_value();
  void newline_and_indent();
  /// Writes a number formatted by std::to_chars: no stream locale can group its digits ("1,024").
  JsonWriter& number_text(std::string_view text);
  JsonWriter& end(Scope scope, char close);

  std::ostream& out_;
  int indent_;
  std::vector<Level> levels_;
  bool key_pending_ = false;  // inside an object: a key was written, its value comes next
  bool done_ = false;
};

}  // namespace ferry
