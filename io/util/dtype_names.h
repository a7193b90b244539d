#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <c10/core/ScalarType.h>

namespace ferry {

/// The dtypes ferry's sources and configs name, in the order messages and docs list them: uint8,
/// int32, int64, float16, bfloat16, float32. The one list of them.
const std::vector<std::string>& dtype_names();
/// dtype_names() as text: "uint8, int32, int64, float16, bfloat16, float32".
std::string dtype_names_text();
/// Whether sources can make `dtype` (one of dtype_names()).
bool is_named_dtype(at::ScalarType dtype);

/// One of dtype_names(), or an alias torch accepts (half, float, int, long). Throws ferry::Error for
/// anything else, listing the names that are accepted.
at::ScalarType parse_dtype(std::string_view name);

/// The name parse_dtype() reads ("float32" for at::kFloat).
std::string dtype_name(at::ScalarType dtype);

}  // namespace ferry
