#pragma once

#include <functional>
#include <random>

#include <ATen/core/Tensor.h>

#include <ferry/copy/nested.h>

namespace ferry::testing {

/// What the leaves of random_nested() are made of.
struct NestedLeaves {
  std::function<at::Tensor()> tensor;  // a tensor leaf
  std::function<Nested()> opaque;      // an opaque leaf
};

/// A random Nested of depth <= 3: lists, tuples and dicts (0 to 4 elements, keys "k<n>" in drawn
/// order) over tensor, None and opaque leaves made by `leaves`.
Nested random_nested(std::mt19937& rng, const NestedLeaves& leaves, int depth = 0);

}  // namespace ferry::testing
