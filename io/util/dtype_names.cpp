#include "ferry/io/util/dtype_names.h"

#include <array>
#include <utility>

#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

// The names of dtype_names() first, then the aliases.
constexpr size_t kNamedDtypes = 6;
constexpr std::array<std::pair<std::string_view, at::ScalarType>, 10> kNames{{
    {"uint8", at::kByte},
    {"int32", at::kInt},
    {"int64", at::kLong},
    {"float16", at::kHalf},
    {"bfloat16", at::kBFloat16},
    {"float32", at::kFloat},
    {"half", at::kHalf},
    {"float", at::kFloat},
    {"int", at::kInt},
    {"long", at::kLong},
}};

}  // namespace

const std::vector<std::string>& dtype_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> named;
    for (size_t i = 0; i < kNamedDtypes; ++i) named.emplace_back(kNames[i].first);
    return named;
  }();
  return names;
}

std::string dtype_names_text() {
  std::string text;
  for (const std::string& name : dtype_names()) text += (text.empty() ? "" : ", ") + name;
  return text;
}

bool is_named_dtype(at::ScalarType dtype) {
  for (size_t i = 0; i < kNamedDtypes; ++i) {
    if (kNames[i].second == dtype) return true;
  }
  return false;
}

at::ScalarType parse_dtype(std::string_view name) {
  for (const auto& [known, dtype] : kNames) {
    if (known == name) return dtype;
  }
  throw Error("unknown dtype '" + std::string(name) + "'; expected one of " + dtype_names_text());
}

std::string dtype_name(at::ScalarType dtype) {
  for (const auto& [known, known_dtype] : kNames) {
    if (known_dtype == dtype) return std::string(known);
  }
  return std::string(c10::toString(dtype));
}

}  // namespace ferry
