#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include <ferry/io/formats/synthetic_source.h>
#include <ferry/pipeline/batch.h>
#include <ferry/stages/pipeline_options.h>

namespace ferry::testing {

/// What a batch of `indices` from `source` must be, computed independently of ferry's collate and
/// pack: torch::stack for fixed fields; torch::full(pad) plus copies for variable-length fields, with
/// an int64 lengths field after each. Pairs of (name, CPU tensor), in delivery order.
std::vector<std::pair<std::string, at::Tensor>> reference_batch(const SyntheticSource& source,
                                                                const std::vector<uint64_t>& indices,
                                                                const CollateOptions& options = {});

/// GoogleTest-friendly: "" when `batch` (on any device) equals the reference byte for byte, with the
/// same names, dtypes and shapes; otherwise a description of the first difference.
std::string compare_with_reference(const Batch& batch, const SyntheticSource& source,
                                   const CollateOptions& options = {});

}  // namespace ferry::testing
