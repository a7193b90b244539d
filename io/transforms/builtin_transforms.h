#pragma once

#include "ferry/io/transforms/transform_registry.h"

// The built-in sample transforms, which TransformRegistry's constructor registers
// (builtin_transforms.cpp). Internal: not installed.

namespace ferry::detail {

TransformKind drop_transform_kind();
TransformKind rename_transform_kind();
/// Box targets that follow their image's geometry (box_transform.cpp).
TransformKind box_transform_kind();
/// Defined in io/workers/, which runs user Python code in worker processes.
TransformKind python_transform_kind();

}  // namespace ferry::detail
