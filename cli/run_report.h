#pragma once

#include <cstdio>
#include <string>

#include "pipeline/pipeline_stats.h"

namespace ferry::cli {

/// The short report at the end of `ferry run`: totals, rates, per-stage busy time and the pinned
/// pool's use.
void print_report(std::FILE* out, const std::string& title, const PipelineStats& stats);

}  // namespace ferry::cli
