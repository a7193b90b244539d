// ferry: staged data loading into GPU-resident batches. One include for a program using ferry:
//
//   #include <ferry/ferry.h>
//
//   ferry::Pipeline pipeline = ferry::load_pipeline("train.yaml");
//   for (const ferry::Batch& batch : pipeline) { ... batch["image"] ... }
//
// These are every header ferry installs, each also includable on its own.
#pragma once

#include "ferry/build_config.h"  // FERRY_VERSION, FERRY_WITH_GPU: what this build of ferry can do

// The pipeline and its batches, options, state and stats, errors.
#include "ferry/pipeline/batch.h"
#include "ferry/pipeline/batch_group.h"
#include "ferry/pipeline/engine_options.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/pipeline.h"
#include "ferry/pipeline/pipeline_group.h"
#include "ferry/pipeline/pipeline_state.h"
#include "ferry/pipeline/pipeline_stats.h"
#include "ferry/stages/pipeline_options.h"
#include "ferry/stages/standard_pipeline.h"

// A YAML config: loading and checking it, the pipeline it describes, a saved state, the run's report.
#include "ferry/assembly/config.h"
#include "ferry/assembly/config_error.h"
#include "ferry/assembly/config_loader.h"
#include "ferry/assembly/configured_pipeline.h"
#include "ferry/assembly/pipeline_state_loader.h"
#include "ferry/assembly/run_report.h"

// Extending ferry: sources, decoders and sample transforms by name, their keys, plugins
// (docs/extending.md).
#include "ferry/assembly/plugin.h"
#include "ferry/io/decoders/decoder.h"
#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/formats/source.h"
#include "ferry/io/formats/source_registry.h"
#include "ferry/io/samplers/sampler.h"
#include "ferry/io/transforms/transform.h"
#include "ferry/io/transforms/transform_registry.h"
#include "ferry/io/util/key_schema.h"

// CUDA managed memory: prefetch and advice for ranges, tensors and modules; a c10::Allocator of it.
#include "ferry/pipeline/managed_allocator.h"
#include "ferry/pipeline/unified_memory.h"

// start_copy: nested CPU/GPU tensors to a device in one asynchronous copy.
#include "ferry/copy/async_copy_handle.h"
