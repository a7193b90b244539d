#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>

#include <ferry/assembly/config.h>
#include <ferry/pipeline/pipeline_stats.h>

namespace ferry::cli {

/// Progress of a run: live (one line rewritten in place a few times a second, for a terminal),
/// plain (a line every `interval`, so logs stay readable) or off; auto picks live on a terminal.
/// Shows batches (of the total, when known), samples/s, GB/s to the device and the ETA.
/// Called by the consumer's thread.
class ProgressLine {
 public:
  ProgressLine(std::FILE* out, std::optional<uint64_t> total_batches, StatsConfig::Progress mode,
               std::chrono::milliseconds interval);
  /// Prints if enough time has passed since the last line. Cheap otherwise.
  void update(const PipelineStats& stats);
  /// Ends the in-place line (terminal) so the report starts on a fresh line.
  void finish(const PipelineStats& stats);

 private:
  void print(const PipelineStats& stats, bool final);

  std::FILE* out_;
  std::optional<uint64_t> total_;
  bool enabled_;
  bool terminal_;  // live: rewrite the line in place
  std::chrono::steady_clock::duration every_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace ferry::cli
