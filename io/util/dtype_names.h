#pragma once

#include <string>
#include <string_view>

#include <c10/core/ScalarType.h>

namespace ferry {

/// The dtypes ferry's sources and configs name: uint8, int32, int64, float16, bfloat16, float32
/// (plus the aliases torch accepts: half, float, int, long). Throws ferry::Error for anything else,
/// listing the names that are accepted.
at::ScalarType parse_dtype(std::string_view name);

/// The name parse_dtype() reads ("float32" for at::kFloat).
std::string dtype_name(at::ScalarType dtype);

}  // namespace ferry
