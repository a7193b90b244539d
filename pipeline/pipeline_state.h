#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ferry {

/// Where a batch starts: its epoch, its number within the epoch, and the position in the epoch's
/// sample order of its first sample. Without skipped samples position = index x batch_size; under
/// `on_error: skip` batches are filled from the next samples, so the position runs ahead.
struct BatchCursor {
  uint64_t epoch = 0;
  uint64_t index = 0;
  uint64_t position = 0;
  bool operator==(const BatchCursor& other) const noexcept {
    return epoch == other.epoch && index == other.index && position == other.position;
  }
};

/// Where a run stands, small enough to save with a checkpoint: the next batch to deliver, counted
/// over all epochs, and what decided the order (so a resume under another order is refused rather
/// than silently delivering other samples). Samplers are pure functions of (seed, epoch,
/// position), so nothing else is needed: no RNG state, no queue contents. Resuming does not depend
/// on thread counts or prefetch depth.
struct PipelineState {
  uint64_t next_batch = 0;
  /// Where next_batch starts in its epoch. Unset: at next_batch x batch_size over whole epochs
  /// (states saved before the cursor existed; with no sample skipped the two agree).
  std::optional<BatchCursor> next;
  /// Samples of next's epoch that all ranks together took before it (Sampler::consumed_before()),
  /// so that a run on another number of ranks deals the rest. Unset: next.position x the saved
  /// world size (states saved before it was recorded).
  std::optional<uint64_t> consumed;
  /// The last delivered batch's epoch and index within it (for people reading the file).
  std::optional<uint64_t> last_epoch;
  std::optional<uint64_t> last_index;
  std::map<std::string, std::string> order;
  /// Where it was read from ("state.json", "<state_dict>"), for messages; not saved. Empty: made here.
  std::string origin;

  /// One JSON object: {"format": "ferry-state", "version": 1, "next_batch": ...,
  /// "next": {"epoch": ..., "batch": ..., "position": ..., "consumed": ...}, ...}.
  std::string to_json() const;
};

/// A PipelineGroup's states (one per device, in device order) as one JSON object: {"format":
/// "ferry-states", "version": 1, "devices": [state, ...]}; a single state as its own to_json().
std::string states_json(const std::vector<PipelineState>& states);

}  // namespace ferry
