#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "pipeline/pipeline_stats.h"

namespace ferry::cli {

/// Progress of a run on stderr: on a terminal one line rewritten in place a few times a second,
/// otherwise a plain line every few seconds (logs stay readable). Called by the consumer's thread.
class ProgressLine {
 public:
  ProgressLine(std::FILE* out, std::optional<uint64_t> total_batches);
  /// Prints if enough time has passed since the last line. Cheap otherwise.
  void update(const PipelineStats& stats);
  /// Ends the in-place line (terminal) so the report starts on a fresh line.
  void finish(const PipelineStats& stats);

 private:
  void print(const PipelineStats& stats, bool final);

  std::FILE* out_;
  std::optional<uint64_t> total_;
  bool terminal_;
  std::chrono::steady_clock::duration every_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace ferry::cli
