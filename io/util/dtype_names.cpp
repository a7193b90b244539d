#include "ferry/io/util/dtype_names.h"

#include <array>
#include <utility>

#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

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

at::ScalarType parse_dtype(std::string_view name) {
  for (const auto& [known, dtype] : kNames) {
    if (known == name) return dtype;
  }
  throw Error("unknown dtype '" + std::string(name) +
              "'; expected one of uint8, int32, int64, float16, bfloat16, float32");
}

std::string dtype_name(at::ScalarType dtype) {
  for (const auto& [known, known_dtype] : kNames) {
    if (known_dtype == dtype) return std::string(known);
  }
  return std::string(c10::toString(dtype));
}

}  // namespace ferry
