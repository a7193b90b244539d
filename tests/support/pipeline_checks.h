#pragma once

#include <cstdint>
#include <memory>

#include "io/source.h"
#include "io/synthetic_source.h"
#include "pipeline/pipeline_options.h"

namespace ferry::testing {

/// Runs a standard pipeline over `source` (which reads `truth`'s samples) to the end and checks,
/// with GoogleTest assertions, every delivered batch: sample order (the sequential sampler's),
/// metadata, device, and every byte against reference_batch(). Returns the number of batches.
uint64_t expect_pipeline_delivers_source(std::shared_ptr<const Source> source, const SyntheticSource& truth,
                                         const PipelineOptions& options);

}  // namespace ferry::testing
