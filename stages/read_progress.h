#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_set>

// How far the decode threads have read, for a source that fetches ahead. Internal: not installed.

namespace ferry {

/// Which steps of a run's order the decode threads have finished reading, for a source that fetches
/// ahead: it may drop what only the steps before first_unfinished() read, since no thread reads those
/// any more. Threads finish steps out of order (groups of samples run in parallel), so the steps finished
/// past the first unfinished one are kept until it is.
///
/// Off (and free) until counting(true): only a source that fetches ahead asks. Thread-safe.
class ReadProgress {
 public:
  /// The step of the read of the sample at `position` in `epoch`.
  using StepOf = std::function<uint64_t(uint64_t epoch, uint64_t position)>;
  /// The run's steps; before the run starts.
  void count_steps(StepOf step_of);
  /// Whether finish() counts (only once count_steps() gave the steps); before the run starts.
  void counting(bool on) noexcept { counting_.store(on && step_of_ != nullptr, std::memory_order_release); }
  /// The read of the sample at `position` in `epoch` is over (done, failed, or found in a cache).
  void finish(uint64_t epoch, uint64_t position);
  /// The first step whose read may not have finished: every step before it is done.
  uint64_t first_unfinished() const;

 private:
  static constexpr size_t kLostAfter = 4096;  // steps finished past one before it is taken as never coming
  std::atomic<bool> counting_{false};
  StepOf step_of_;
  mutable std::mutex mutex_;
  uint64_t first_unfinished_ = 0;
  std::unordered_set<uint64_t> finished_after_;  // steps finished past first_unfinished_
};

}  // namespace ferry
