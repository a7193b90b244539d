#pragma once

#include <string>
#include <string_view>

#include "ferry/assembly/config_error.h"
#include "ferry/pipeline/pipeline_state.h"

namespace ferry {

/// Reads what PipelineState::to_json() wrote (`ferry run --save-state`). Throws ConfigError naming
/// the file, line and column and the key for anything else: not JSON, another format or version,
/// a missing or negative next_batch, an order that is not a mapping of strings.
PipelineState load_pipeline_state(const std::string& path);
PipelineState parse_pipeline_state(std::string_view text, const std::string& origin);

}  // namespace ferry
