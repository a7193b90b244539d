#pragma once

#include <memory>
#include <optional>
#include <string>

#include <c10/core/Device.h>

#include "ferry/io/decoders/decoder.h"
#include "ferry/io/formats/source.h"
#include "ferry/io/samplers/sampler.h"
#include "ferry/io/transforms/transform.h"
#include "ferry/pipeline/pipeline.h"
#include "ferry/stages/pipeline_options.h"

namespace ferry {

/// Builds and starts the standard pipeline over `source`: batch planner (over `sampler`, or the
/// sequential order when null) -> DecodeStage -> CollateStage -> PackStage -> H2DSubmitStage ->
/// EventWaitStage, with a pinned pool sized from the options (or from the source's largest batch).
///
/// Fields in `field_decoders` are decoded by the instance given (a JpegDecoder with its own resize and
/// crop, say), the others by the decoder options.decoders or the source names in DecoderRegistry::global().
/// `transforms` then run on each decoded sample, and the batches hold the fields they make.
///
/// Everything is checked before a thread starts; problems throw ferry::Error naming the option or
/// field: invalid options, an unusable device, an unknown decoder, a variable-length field without
/// max_length and no pool.slab_bytes, a pinned budget too small for the slabs.
Pipeline make_pipeline(std::shared_ptr<const Source> source, PipelineOptions options,
                       std::shared_ptr<const Sampler> sampler = nullptr, const FieldDecoders& field_decoders = {},
                       SampleTransforms transforms = {});

/// "auto", "cpu", "cuda" or "cuda:N" as a device this build and machine can use. "auto" is cuda:0
/// when there is one, else the CPU. Throws ferry::Error saying why a device cannot be used (a CPU
/// build, no visible device, an index out of range, an unknown name).
at::Device resolve_device(const std::string& name);

}  // namespace ferry
