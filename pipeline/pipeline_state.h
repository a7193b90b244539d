#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace ferry {

/// Where a run stands, small enough to save with a checkpoint: the next batch to deliver, counted
/// over all epochs, and what decided the order (so a resume under another order is refused rather
/// than silently delivering other samples). Samplers are pure functions of (seed, epoch,
/// position), so nothing else is needed: no RNG state, no queue contents. Resuming does not depend
/// on thread counts or prefetch depth.
struct PipelineState {
  uint64_t next_batch = 0;
  /// The last delivered batch's epoch and index within it (for people reading the file).
  std::optional<uint64_t> last_epoch;
  std::optional<uint64_t> last_index;
  std::map<std::string, std::string> order;

  /// One JSON object: {"format": "ferry-state", "version": 1, "next_batch": ..., ...}.
  std::string to_json() const;
};

}  // namespace ferry
