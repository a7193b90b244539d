#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>

namespace ferry::detail {

/// A count of batches integrated over time (Note [occupancy] in pipeline_graph.h), and how long the side that adds
/// to it was held up by a full count. change() from any thread (a short lock, no allocation);
/// snapshot() from any thread. Times are nanoseconds since the start.
class Occupancy {
 public:
  struct Snapshot {
    double mean = 0.0;        // of the count capped at the capacity
    size_t peak = 0;          // likewise capped
    uint64_t full_ns = 0;     // time the count stood at the capacity or above
    uint64_t blocked_ns = 0;  // the part of full_ns during which the producer was waiting
  };
  explicit Occupancy(size_t capacity) : capacity_(capacity) {}
  /// Adds `delta` at `now_ns`; `producer_waiting`, when given, says from now on whether the
  /// producer waits when the count is full (false while it works or once it has no more to add).
  /// The count after a change, capped at the capacity (as the peak is), and the time it counted from:
  /// `now_ns`, or the last change's time where that is later (callers read the clock before the lock), so that changes'
  /// times follow one another in the order they were counted.
  struct Change {
    size_t count = 0;
    uint64_t at_ns = 0;
  };
  Change change(int delta, uint64_t now_ns, std::optional<bool> producer_waiting = std::nullopt);
  /// The integrals up to `until_ns` (the end of the run, or now).
  Snapshot snapshot(uint64_t until_ns) const;

 private:
  void advance(uint64_t now_ns);  // requires mutex_

  const size_t capacity_;
  mutable std::mutex mutex_;
  int64_t count_ = 0;
  bool producer_waiting_ = true;
  uint64_t since_ns_ = 0;    // the last change
  uint64_t area_ = 0;        // integral of min(count, capacity) dt up to since_ns_
  uint64_t full_ns_ = 0;     // up to since_ns_
  uint64_t blocked_ns_ = 0;  // up to since_ns_
  size_t peak_ = 0;
};

}  // namespace ferry::detail
