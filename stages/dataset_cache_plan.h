#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <c10/core/Device.h>

#include "ferry/io/samplers/sampler.h"
#include "ferry/pipeline/dataset_cache.h"
#include "ferry/stages/decode_stage.h"
#include "ferry/stages/pipeline_options.h"

namespace ferry {

/// The dataset cache a pipeline decoding with `decode` with `options` gets (Note [dataset cache]): its memory,
/// device, fields and arena size: room for every distinct sample `sampler` (this rank's) visits in
/// options.epochs epochs — one epoch's when every epoch visits the same samples, else up to the whole
/// source's. Checks
/// everything before anything is allocated, and throws ferry::Error naming the problem:
///   - a field whose decoder, or a transform, is not the same every epoch (a random crop), by name;
///   - memory and device that do not go together (host memory for a GPU pipeline, device or managed
///     memory for a CPU one), a build without the gather kernel, managed memory where it cannot work
///     (UnifiedMemoryUnsupportedError);
///   - a size that cannot be known (a variable-length field without max_length, and no max_bytes);
///   - more than cache.max_bytes (fixed-size fields; with variable-length ones the arena is capped at
///     max_bytes and samples that do not fit stay uncached);
///   - more than the device has free beside `prefetch` batches of `largest_batch` bytes (host
///     memory: more than the machine has).
/// Reads the device's free memory (which creates its CUDA context). Thread-safe.
/// What plan_dataset_cache() says after DecodeStage::varies_by_epoch()'s reason.
extern const char* const kCacheRepeats;

DatasetCache::Options plan_dataset_cache(const DecodeStage& decode, const PipelineOptions& options, at::Device device,
                                         const Sampler& sampler, std::optional<size_t> largest_batch);

}  // namespace ferry
