#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/assembly/config.h"
#include "ferry/io/formats/source.h"
#include "ferry/pipeline/pipeline.h"
#include "ferry/pipeline/pipeline_group.h"
#include "ferry/pipeline/pipeline_state.h"
#include "ferry/stages/pipeline_options.h"

namespace ferry {

/// Checks what in `config` needs this machine or the source's data: the device exists and this build
/// can use it, the source can be made, the largest batch fits in a slab, the pinned budget holds the
/// pool's slabs (PoolOptions::slabs(), each rounded up to a page), the torchrun environment makes sense. Throws
/// ConfigError listing every problem, each located where its key was set. Starts no thread and allocates no pinned
/// memory. Returns the source it made to look at the data, so that callers need not index the dataset again.
std::shared_ptr<const Source> check_config(const Config& config);

/// The standard pipeline a YAML config file describes (docs/config.md), with `overrides`
/// ("key.path=value", as `ferry run --set` takes them) applied: load_config(), then make_pipeline(). Throws
/// ConfigError listing every problem with its file:line:column before any thread starts, or ferry::Error.
Pipeline load_pipeline(const std::string& path, const std::vector<std::string>& overrides = {});

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

/// The devices a config's group feeds (Note [one process, several devices] in pipeline/pipeline_group.h):
/// transfer.devices with `all` as every visible GPU (cuda:0, cuda:1, ...); without transfer.devices the one
/// device transfer.device names. Throws ferry::Error for `all` on a machine or build without a GPU.
std::vector<std::string> group_devices(const Config& config);

/// The device(s) a config asks for, as written, for reports: transfer.devices' text ("all", "[cuda:0,
/// cuda:1]") for a group, else transfer.device ("auto", "cuda", ...).
std::string requested_devices(const Config& config);

/// Where the `device`-th pipeline of a config's group sits among data-parallel ranks: this process's
/// placement (the config's rank and world size, else torchrun's), and with transfer.devices' N devices,
/// rank x N + device among world_size x N. Throws like resolve_placement().
Placement group_placement(const Config& config, size_t device);

/// A pipeline per device of group_devices(config), decoding on one shared pool of decode.threads (auto:
/// this process's share of the cores, as for one device), over `source` (check_config(config)'s). Without
/// transfer.devices, a group of one: the pipeline make_pipeline(config, source) makes. With `resume` (a saved
/// PipelineGroup::state(), one state per device) it starts at the states' step; states of another number of
/// devices or ranks resume from the first one's (the rest of its epoch dealt to these devices). Throws
/// ConfigError for an invalid config, or a state of another order (naming each key), and ferry::Error.
PipelineGroup make_pipeline_group(const Config& config, std::shared_ptr<const Source> source,
                                  const std::vector<PipelineState>& resume = {});
/// check_config(), then the same.
PipelineGroup make_pipeline_group(const Config& config, const std::vector<PipelineState>& resume = {});

/// The states a group make_pipeline_group(config, source, resume) would give before delivering anything
/// (PipelineGroup::state() before its first step): where `resume` points (its batch named as last
/// delivered left out), or each device's start under the order the group would record. What `ferry run`
/// saves when a signal stops it while the group is still being made (Note [a signal while starting] in
/// cli/main.cpp). Makes no pipeline and starts no thread; touches CUDA only where transfer.devices is
/// `all` (to count the GPUs). Throws like group_devices().
std::vector<PipelineState> starting_states(const Config& config, const Source& source,
                                           const std::vector<PipelineState>& resume = {});

/// Batches a pipeline that make_pipeline(config, ...) returned will deliver, from its first batch on
/// (`options` is its Pipeline::options(), which carries a resume point): its planner's count, for
/// progress totals and len(). Under `on_error: skip` at most this many (skipped samples can shorten
/// epochs). Builds the sampler; starts no thread.
uint64_t planned_batches(const Config& config, const EngineOptions& options, const Source& source);

}  // namespace ferry
