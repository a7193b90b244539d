#pragma once

#include <memory>
#include <optional>
#include <string>

#include <c10/core/Device.h>

#include "io/config.h"
#include "io/decoder.h"
#include "io/sampler.h"
#include "io/source.h"
#include "pipeline/pipeline.h"

namespace ferry {

/// Builds and starts the standard pipeline over `source`: batch planner (over `sampler`, or the
/// sequential order when null) -> DecodeStage -> CollateStage -> PackStage -> H2DSubmitStage ->
/// EventWaitStage, with a pinned pool sized from the options (or from the source's largest batch).
///
/// Fields in `field_decoders` are decoded by the instance given (a JpegDecoder with its own resize and
/// crop, say), the others by the decoder options.decoders or the source names in DecoderRegistry::global().
///
/// Everything is checked before a thread starts; problems throw ferry::Error naming the option or
/// field: invalid options, an unusable device, an unknown decoder, a variable-length field without
/// max_length and no pool.slab_bytes, a pinned budget too small for the slabs.
Pipeline make_pipeline(std::shared_ptr<const Source> source, PipelineOptions options,
                       std::shared_ptr<const Sampler> sampler = nullptr, const FieldDecoders& field_decoders = {});

/// The stages make_pipeline() runs, for callers that keep a handle on a part (tests watch the pool).
/// Resolves options.device in place ("auto" becomes "cpu" or "cuda:0"). Throws like make_pipeline().
StageSet make_standard_stages(std::shared_ptr<const Source> source, PipelineOptions& options,
                              std::shared_ptr<const Sampler> sampler = nullptr,
                              const FieldDecoders& field_decoders = {});

/// Checks what in `config` needs this machine or the source's data: the device exists and this build
/// can use it, the source can be made, the largest batch fits in a slab, the pinned budget holds
/// prefetch slabs, the torchrun environment makes sense. Throws ConfigError listing every problem,
/// each located where its key was set. Starts no thread and allocates no pinned memory. Returns the
/// source it made to look at the data, so that callers need not index the dataset again.
std::shared_ptr<const Source> check_config(const Config& config);

/// check_config(), then the standard pipeline over the config's source and sampler. With `resume`
/// (a saved Pipeline::state()), it starts at the state's next batch: the batches delivered are
/// exactly those the saved run had not delivered yet. Throws ConfigError (nothing started) for an
/// invalid config or a state saved under another order (naming each key that differs), or
/// ferry::Error.
Pipeline make_pipeline(const Config& config, const std::optional<PipelineState>& resume = std::nullopt);
/// The same over `source`, the source check_config(config) returned (indexing a large dataset, a
/// folder of a million files or thousands of shards, takes a while: do it once).
Pipeline make_pipeline(const Config& config, std::shared_ptr<const Source> source,
                       const std::optional<PipelineState>& resume = std::nullopt);

/// Batches a pipeline that make_pipeline(config, ...) returned will deliver, from its first batch on
/// (`options` is its Pipeline::options(), which carries a resume point): its planner's count, for
/// progress totals and len(). Under `on_error: skip` at most this many (skipped samples can shorten
/// epochs). Builds the sampler; starts no thread.
uint64_t planned_batches(const Config& config, const PipelineOptions& options, const Source& source);

/// "auto", "cpu", "cuda" or "cuda:N" as a device this build and machine can use. "auto" is cuda:0
/// when there is one, else the CPU. Throws ferry::Error saying why a device cannot be used (a CPU
/// build, no visible device, an index out of range, an unknown name).
at::Device resolve_device(const std::string& name);

}  // namespace ferry
