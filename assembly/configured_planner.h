#pragma once

#include <cstddef>

#include "ferry/assembly/config.h"
#include "ferry/io/formats/source.h"
#include "ferry/pipeline/engine_options.h"
#include "ferry/stages/batch_planner.h"

// What a configured pipeline plans, for the programs that show it (progress totals, len() in Python).
// Internal, not installed: planned_batches() (configured_pipeline.h) is the public part.

namespace ferry {

/// The planner such a pipeline runs, to ask it what it plans (total_batches(), batches_in_epoch()):
/// a twin, not the pipeline's own. Builds the sampler; starts no thread.
BatchPlanner planner_of(const Config& config, const EngineOptions& options, const Source& source);
/// The same for the `device`-th pipeline of make_pipeline_group(config, ...) (each device's planner plans
/// as many batches: a group's steps).
BatchPlanner planner_of(const Config& config, const EngineOptions& options, const Source& source, size_t device);

}  // namespace ferry
