#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ferry/assembly/config_error.h"
#include "ferry/io/samplers/sampler.h"
#include "ferry/pipeline/engine_options.h"
#include "ferry/pipeline/pipeline_state.h"

namespace ferry {

/// Reads what PipelineState::to_json() wrote (`ferry run --save-state`). Throws ConfigError naming
/// the file, line and column and the key for anything else: not JSON (or more than 1 MiB, or a
/// directory), another format or version, a key missing, unknown or not a whole number, an order
/// that is not a mapping of strings. The state's `origin` is `path` (or `origin`).
PipelineState load_pipeline_state(const std::string& path);
PipelineState parse_pipeline_state(std::string_view text, const std::string& origin);
/// The same for a group's states (what states_json() wrote: "format": "ferry-states", one state per
/// device), or one state as a list of one. Problems name the device: devices[1].next_batch.
std::vector<PipelineState> load_pipeline_states(const std::string& path);
std::vector<PipelineState> parse_pipeline_states(std::string_view text, const std::string& origin);

/// Checks a state against the run that would resume it (make_pipeline() does): next_batch within
/// the run's epochs and max_batches; next.epoch within the epochs; next.batch and next.position
/// within an epoch and consistent with each other and with next_batch (exactly, unless on_error:
/// skip may have moved positions ahead); last_delivered the batch before next. Throws ConfigError
/// naming the state's origin and each key that is off, so a hand-edited or mismatched state is
/// refused instead of resuming misaligned or delivering nothing.
void check_resume_state(const PipelineState& state, const EngineOptions& options, const Sampler& sampler);

}  // namespace ferry
