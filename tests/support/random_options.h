#pragma once

#include <random>

#include <ferry/io/formats/synthetic_source.h>

namespace ferry::testing {

/// A random synthetic dataset: 1 to 4 fields (or min_fields to max_fields) of random dtypes (all
/// six), ranks 0 to 3 with sizes 0 to 6 (empty tensors included), some variable-length (lengths from
/// 0), some with value ranges.
SyntheticOptions random_synthetic_options(std::mt19937_64& rng, uint64_t samples, int64_t min_fields = 1,
                                          int64_t max_fields = 4);

}  // namespace ferry::testing
