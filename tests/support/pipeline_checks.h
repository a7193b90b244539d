#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include <ferry/io/formats/source.h>
#include <ferry/io/formats/synthetic_source.h>
#include <ferry/pipeline/error.h>
#include <ferry/pipeline/pipeline.h>
#include <ferry/stages/pipeline_options.h>

namespace ferry::testing {

/// Runs a standard pipeline over `source` (which reads `truth`'s samples) to the end and checks,
/// with GoogleTest assertions, every delivered batch: sample order (the sequential sampler's),
/// metadata, device, and every byte against reference_batch(). Returns the number of batches.
uint64_t expect_pipeline_delivers_source(std::shared_ptr<const Source> source, const SyntheticSource& truth,
                                         const PipelineOptions& options);

/// What a run expected to fail delivered: its batches before the error, and the error.
struct RunToError {
  uint64_t batches = 0;
  std::optional<Error> error;  // unset: the run ended without one
};

/// Takes batches from `pipeline` until its end or its ferry::Error, checking each against `truth`
/// byte for byte (compare_with_reference, GoogleTest assertions). Any other exception propagates.
RunToError run_to_error(Pipeline& pipeline, const SyntheticSource& truth);

/// A small run on the CPU — 90 synthetic samples of float32 [7], batches of 6, 3 decode threads, prefetch
/// 4 — taken to its end, each batch checked as run_to_error() checks it (and none failing); its stats. For
/// tests of what a run leaves beside its batches (the profilers' ranges).
PipelineStats run_small_pipeline();

}  // namespace ferry::testing
