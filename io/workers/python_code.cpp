#include "ferry/io/workers/python_code.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/utf8.h"

namespace ferry::detail {
namespace {

constexpr double kMaxDim = 1073741824.0;
constexpr std::string_view kHandlePrefix = "<object ";

std::mutex& held_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, HeldObject>& held() {
  static std::map<std::string, HeldObject> objects;
  return objects;
}

std::mutex& python_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::optional<std::pair<std::string, std::string>>& python_default() {
  static std::optional<std::pair<std::string, std::string>> chosen;
  return chosen;
}

bool is_number(const std::string& text) {
  if (text.empty()) return false;
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() && std::isfinite(value);
}

}  // namespace

std::string json_string(std::string_view text) {
  // A config's text need not be UTF-8 (a path in Latin-1): Python gets such a byte as surrogateescape
  // gives it, so the path the code opens is the one the config names.
  std::string out = "\"";
  append_json_escaped(out, text, InvalidUtf8::kSurrogateEscape);
  return out + "\"";
}

std::string json_value(const KeyValue& value) {
  if (value.is_list()) {
    std::string out = "[";
    for (const KeyValue& item : value.items()) out += (out.size() > 1 ? ", " : "") + json_value(item);
    return out + "]";
  }
  if (value.is_mapping()) {
    std::string out = "{";
    for (const auto& [name, item] : value.entries()) {
      out += (out.size() > 1 ? ", " : "") + json_string(name) + ": " + json_value(item);
    }
    return out + "}";
  }
  const std::string& text = value.text();
  if (text == "true" || text == "false") return text;
  if (text == "True" || text == "TRUE") return "true";
  if (text == "False" || text == "FALSE") return "false";
  if (text == "null" || text == "~" || text == "Null" || text == "NULL") return "null";
  if (is_number(text) && text.find_first_of("xXnN") == std::string::npos) {
    // An integer as written (any size: Python's ints have none); any other number as the double it
    // reads as, in a form JSON takes (no '+', no leading or trailing '.', no leading zeros).
    const bool integer = text.find_first_not_of("-0123456789") == std::string::npos &&
                         !(text.size() > 1 && text[text.front() == '-' ? 1 : 0] == '0');
    if (integer) return text;
    char formatted[32];
    std::snprintf(formatted, sizeof(formatted), "%.17g", std::strtod(text.c_str(), nullptr));
    return formatted;
  }
  return json_string(text);
}

std::string json_fields(const std::vector<FieldSpec>& fields) {
  std::string out = "[";
  for (const FieldSpec& field : fields) {
    if (out.size() > 1) out += ", ";
    out += "{\"name\": " + json_string(field.name) + ", \"dtype\": " + json_string(dtype_name(field.dtype)) +
           ", \"shape\": [";
    for (size_t i = 0; i < field.shape.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(field.shape[i]);
    out += "], \"max_length\": " + (field.max_length ? std::to_string(*field.max_length) : std::string("null")) + "}";
  }
  return out + "]";
}

std::vector<FieldSpec> declared_fields(const KeyValue& list) {
  std::vector<FieldSpec> fields;
  for (const KeyValue& entry : list.items()) {
    FieldSpec field;
    field.name = entry.at("name").text();
    field.dtype = parse_dtype(entry.at("dtype").text());
    if (const KeyValue* shape = entry.find("shape")) {
      for (const KeyValue& size : shape->items()) field.shape.push_back(size.integer());
    }
    if (const KeyValue* max_length = entry.find("max_length")) {
      field.shape.insert(field.shape.begin(), kVariableLength);
      field.max_length = max_length->integer();
    }
    fields.push_back(std::move(field));
  }
  return fields;
}

KeySpec fields_key(std::string description) {
  using Type = KeySpec::Type;
  const KeySpec dimension{.name = "", .type = Type::kInteger, .min = 0, .max = kMaxDim};
  return {.name = "fields",
          .type = Type::kList,
          .description = std::move(description),
          .default_value = "inferred",
          .example = "[{name: image, dtype: uint8, shape: [3, 64, 64]}, {name: label, dtype: int64}]",
          .min = 1,
          .item = {{.name = "",
                    .type = Type::kMapping,
                    .keys = {{.name = "name",
                              .type = Type::kString,
                              .description = "The field's name: its key in the dict and in a batch.",
                              .default_value = "required",
                              .required = true,
                              .example = "image",
                              .min = 1,
                              .expected = "a non-empty name",
                              .missing = "the field's name"},
                             {.name = "dtype",
                              .type = Type::kChoice,
                              .description = "Element type; Python numbers are converted to it, arrays must have it.",
                              .default_value = "required",
                              .required = true,
                              .example = "uint8",
                              .choices = dtype_names(),
                              .missing = "one of: " + dtype_names_text()},
                             {.name = "shape",
                              .type = Type::kList,
                              .description = "Shape of one sample's array; of a variable-length field, the shape "
                                             "after its first dimension.",
                              .default_value = "[]",
                              .example = "[3, 64, 64]",
                              .item = {dimension},
                              .expected = "a list of integers >= 0, e.g. [3, 64, 64]",
                              .type_text = "list of integers >= 0"},
                             {.name = "max_length",
                              .type = Type::kInteger,
                              .description = "Makes the field variable-length: its first dimension may be "
                                             "anything up to this; batches pad it and add `<field>_lengths`.",
                              .default_value = "fixed length",
                              .example = "512",
                              .min = 1,
                              .max = kMaxDim}}}},
          .expected = "a non-empty list of fields ({name, dtype, shape, max_length})",
          .type_text = "list of fields"};
}

void check_declared_fields(const KeyValue& list, KeyProblems& problems) {
  std::map<std::string, std::string> first_seen;
  for (const KeyValue& field : list.items()) {
    const KeyValue& name = field.at("name");
    if (const auto [it, inserted] = first_seen.emplace(name.text(), field.key()); !inserted) {
      problems.add(name, "field '" + name.text() + "' appears twice (also " + it->second + ")");
    }
  }
}

std::optional<uint64_t> slot_bytes(const std::vector<FieldSpec>& fields) {
  uint64_t total = 0;
  for (const FieldSpec& field : fields) {
    uint64_t elements = 1;
    for (size_t i = 0; i < field.shape.size(); ++i) {
      if (field.shape[i] == kVariableLength) {
        if (!field.max_length) return std::nullopt;
        elements *= static_cast<uint64_t>(*field.max_length);
      } else {
        elements *= static_cast<uint64_t>(field.shape[i]);
      }
    }
    total = slot_aligned(total) + elements * c10::elementSize(field.dtype);
  }
  return total;
}

WorkerSetup worker_setup(const MakeContext& context, std::string what, std::string json, std::string payload) {
  WorkerSetup setup;
  const auto [python, python_path] = default_worker_python();
  setup.python = context.python.empty() ? python : context.python;
  setup.python_path = context.python_path.empty() ? python_path : context.python_path;
  setup.setup = "{\"seed\": " + std::to_string(context.seed) + ", " + json + "}";
  setup.payload = std::move(payload);
  setup.what = std::move(what);
  setup.timeout = context.timeout;
  return setup;
}

std::string hold_object(HeldObject object) {
  static uint64_t next = 0;
  std::lock_guard lock(held_mutex());
  const std::string handle =
      std::string(kHandlePrefix) + std::to_string(++next) + " in process " + std::to_string(getpid()) + ": " +
      object.description + ">";
  held().emplace(handle, std::move(object));
  return handle;
}

std::optional<HeldObject> held_object(const std::string& handle) {
  std::lock_guard lock(held_mutex());
  const auto found = held().find(handle);
  if (found == held().end()) return std::nullopt;
  return found->second;
}

void release_object(const std::string& handle) {
  std::lock_guard lock(held_mutex());
  held().erase(handle);
}

bool is_object_handle(const std::string& text) { return text.starts_with(kHandlePrefix) && text.ends_with(">"); }

std::pair<std::string, std::string> default_worker_python() {
  std::lock_guard lock(python_mutex());
  if (python_default()) return *python_default();
  const char* chosen = std::getenv("FERRY_PYTHON");
  return {chosen != nullptr && *chosen != '\0' ? chosen : "python3", ""};
}

void set_default_worker_python(std::string python, std::string python_path) {
  std::lock_guard lock(python_mutex());
  python_default() = std::pair{std::move(python), std::move(python_path)};
}

}  // namespace ferry::detail
