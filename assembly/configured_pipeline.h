#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "ferry/assembly/config.h"
#include "ferry/io/formats/source.h"
#include "ferry/pipeline/pipeline.h"
#include "ferry/pipeline/pipeline_options.h"
#include "ferry/pipeline/pipeline_state.h"
#include "ferry/stages/batch_planner.h"

namespace ferry {

/// Checks what in `config` needs this machine or the source's data: the device exists and this build
/// can use it, the source can be made, the largest batch fits in a slab, the pinned budget holds the
/// pool's slabs (PoolOptions::slabs(), each rounded up to a page), the torchrun environment makes sense. Throws
/// ConfigError listing every problem, each located where its key was set. Starts no thread and allocates no pinned
/// memory. Returns the source it made to look at the data, so that callers need not index the dataset again.
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

/// The planner such a pipeline runs, to ask it what it plans (total_batches(), batches_in_epoch()):
/// a twin, not the pipeline's own. Builds the sampler; starts no thread.
BatchPlanner planner_of(const Config& config, const PipelineOptions& options, const Source& source);

}  // namespace ferry
