#pragma once

#include <memory>

#include "ferry/io/decoders/decoder.h"
#include "ferry/io/formats/source.h"
#include "ferry/io/samplers/sampler.h"
#include "ferry/io/transforms/transform.h"
#include "ferry/pipeline/advanced.h"
#include "ferry/stages/pipeline_options.h"

// The standard stages as a StageSet, for ferry's assembly of a group (make_pipeline_group()) and tests that
// keep a handle on a part. Internal, not installed: see pipeline/advanced.h.

namespace ferry {

/// The stages make_pipeline() runs, for callers that keep a handle on a part (tests watch the pool).
/// Resolves options.device in place ("auto" becomes "cpu" or "cuda:0"). Throws like make_pipeline().
StageSet make_standard_stages(std::shared_ptr<const Source> source, PipelineOptions& options,
                              std::shared_ptr<const Sampler> sampler = nullptr,
                              const FieldDecoders& field_decoders = {}, SampleTransforms transforms = {});

}  // namespace ferry
