#pragma once

#include <cstddef>
#include <vector>

#include "ferry/pipeline/engine_options.h"
#include "ferry/pipeline/pipeline.h"
#include "ferry/pipeline/pipeline_group.h"
#include "ferry/pipeline/stage.h"

// Advanced: a Pipeline or a PipelineGroup from a set of stages of your own, through the engine's stage
// interfaces (pipeline/stage.h). Internal, not installed: these interfaces and the engine types they
// name (work items, the pinned pool, the sample placer) change with ferry's engine. Programs extend ferry
// through sources, decoders, transforms and plugins instead (docs/extending.md); ferry's own assembly
// (make_pipeline(), make_pipeline_group()) and its tests use this door.

namespace ferry {

/// Builds and starts a pipeline from its stages (make_standard_stages() makes the standard ones). Throws
/// ferry::Error for invalid options or a missing stage; no thread is left behind.
Pipeline pipeline_from_stages(StageSet stages, EngineOptions options);

/// One device's pipeline of a group: its stages and options (options.device its device).
struct PipelinePart {
  StageSet stages;
  EngineOptions options;
};

/// Starts one pipeline per part, their graphs in one arena of `decode_threads` decode threads (Note [one
/// process, several devices] in pipeline_group.h). Throws ferry::Error for no part, or a part's invalid
/// options; nothing is left running.
PipelineGroup pipeline_group_from_parts(std::vector<PipelinePart> parts, size_t decode_threads);

}  // namespace ferry
