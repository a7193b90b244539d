// ferry: staged data loading into GPU-resident batches. One include for a program using ferry:
//
//   #include <ferry/ferry.h>
//
//   ferry::Pipeline pipeline = ferry::Pipeline::from_yaml("train.yaml");
//   for (const ferry::Batch& batch : pipeline) { ... batch["image"] ... }
//
// The parts, each also includable on its own:
#pragma once

#include "ferry/build_config.h"  // FERRY_VERSION, FERRY_WITH_GPU: what this build of ferry can do

// The engine: Pipeline, Batch, options, stats, state, errors.
#include "ferry/pipeline/batch.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/pipeline.h"
#include "ferry/pipeline/pipeline_group.h"
#include "ferry/pipeline/pipeline_options.h"
#include "ferry/pipeline/pipeline_state.h"
#include "ferry/pipeline/pipeline_stats.h"

// CUDA managed memory: prefetch and advice for ranges, tensors and modules; a c10::Allocator of it.
#include "ferry/pipeline/managed_allocator.h"
#include "ferry/pipeline/unified_memory.h"

// Data: sources (dataset formats) and their writers, samplers, decoders and encoders.
#include "ferry/io/decoders/decoder.h"
#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/decoders/image_decoder.h"
#include "ferry/io/decoders/jpeg_decoder.h"
#include "ferry/io/decoders/jpeg_encoder.h"
#include "ferry/io/decoders/json_decoder.h"
#include "ferry/io/decoders/label_decoder.h"
#include "ferry/io/decoders/npy_decoder.h"
#include "ferry/io/decoders/npy_encoder.h"
#include "ferry/io/decoders/png_decoder.h"
#include "ferry/io/decoders/raw_decoder.h"
#include "ferry/io/formats/image_folder_source.h"
#include "ferry/io/formats/indexed_dataset.h"
#include "ferry/io/formats/indexed_dataset_writer.h"
#include "ferry/io/formats/source.h"
#include "ferry/io/formats/synthetic_source.h"
#include "ferry/io/formats/tar_shard_source.h"
#include "ferry/io/formats/tar_writer.h"
#include "ferry/io/formats/token_window_source.h"
#include "ferry/io/samplers/sampler.h"
#include "ferry/io/samplers/sequential_sampler.h"
#include "ferry/io/samplers/shard_shuffle_sampler.h"
#include "ferry/io/samplers/sharded_sampler.h"
#include "ferry/io/samplers/shuffled_sampler.h"

// Assembly: make_pipeline() over a source, and from a YAML config (load_config, check_config).
#include "ferry/assembly/config.h"
#include "ferry/assembly/config_error.h"
#include "ferry/assembly/config_loader.h"
#include "ferry/assembly/configured_pipeline.h"
#include "ferry/assembly/pipeline_state_loader.h"
#include "ferry/stages/standard_pipeline.h"

// start_copy: nested CPU/GPU tensors to a device in one asynchronous copy.
#include "ferry/copy/async_copy_handle.h"
