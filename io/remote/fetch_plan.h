#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

// Which extents the shard cache fetches ahead, and what it drops for them. Internal: not installed.

namespace ferry {

inline constexpr uint64_t kNoRead = UINT64_MAX;

/// The reads ahead of the reading point: the runs of steps that read each extent, counted from an
/// origin (the reading point; the runs may start before it).
class ReadsAhead {
 public:
  /// Records that `id` is read at steps [first, last]. Runs may come in any order and overlap (several
  /// orders read one cache).
  void add(uint32_t id, uint64_t first, uint64_t last);
  /// Records `other`'s runs from its origin on, as steps from that origin.
  void add(const ReadsAhead& other);
  /// Sorts and merges what add() recorded, with the origin at step 0; call it before the queries below.
  void finish();
  /// Counts the steps below from `origin` (a step in the terms add() was given).
  void set_origin(uint64_t origin);

  /// The first step at or after `step` that reads `id`; kNoRead where none does.
  uint64_t next_read(uint32_t id, uint64_t step) const;
  /// The first run of reads of `id` that ends at or after `step`: its first step (0 where it began before
  /// the origin; before `step` where `step` is within the run) and its last; kNoRead for both where none
  /// does.
  std::pair<uint64_t, uint64_t> next_run(uint32_t id, uint64_t step) const;
  /// Calls visit(step, id) for each run from the origin on, in step order (one begun before the origin
  /// at step 0), until visit returns false.
  template <typename Visit>
  void for_each_start(Visit&& visit) const {
    for (const uint32_t id : under_way_) {
      if (!visit(uint64_t{0}, id)) return;
    }
    for (size_t i = first_start_; i < starts_.size(); ++i) {
      if (!visit(starts_[i].first - origin_, starts_[i].second)) return;
    }
  }
  /// The extents read from the origin on, each with its next read.
  std::unordered_map<uint32_t, uint64_t> first_reads() const;

 private:
  std::unordered_map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> runs_;
  std::vector<std::pair<uint64_t, uint32_t>> starts_;  // (first step, id) of every run, in step order
  uint64_t origin_ = 0;
  size_t first_start_ = 0;           // the first of starts_ at or after the origin
  std::vector<uint32_t> under_way_;  // extents whose run began before the origin and goes on past it
};

/// An extent in the cache, or being fetched into it, as the plan sees it.
struct HeldExtent {
  std::string key;
  std::optional<uint32_t> id;  // none: no order reads it (another dataset's, or stale)
  uint64_t bytes = 0;
  uint64_t recency = 0;            // larger: read more recently
  bool pinned = false;             // being fetched: it cannot be dropped
  uint64_t others_next = kNoRead;  // its next read by another process sharing the cache, as far as known
};

/// A fetch to start now, and the extents to drop first to make room for it.
struct PlannedFetch {
  uint32_t id = 0;
  uint64_t step = 0;  // the step that first needs it
  std::vector<HeldExtent> drops;
  uint64_t extra = 0;  // fetches it costs beyond Belady's rule, over the reads ahead
};

/// A cache may spend one fetch beyond the fewest per this many it has done, to fetch ahead where the
/// fewest would make the reading wait: at most 4% more than the fewest.
inline constexpr uint64_t kFetchesPerSpare = 25;

/// Fetches a cache that did `fetches`, `spent` of them beyond the fewest, may still spend.
inline uint64_t spare_fetches(uint64_t fetches, uint64_t spent) {
  return fetches / kFetchesPerSpare > spent ? fetches / kFetchesPerSpare - spent : 0;
}

/// Note [fetching ahead, fetching least]: the fetches to start now, in the order they are needed, of the
/// extents read now and the next `ahead` read after them: those that cost no fetch more over the reads ahead than
/// Belady's rule, and at most one that costs up to `spare` more. `capacity`: the cache's bytes (0: no bound);
/// `bytes_of`: an extent's bytes, or a guess.
std::vector<PlannedFetch> plan_fetches(const ReadsAhead& reads, const std::vector<HeldExtent>& held, uint64_t capacity,
                                       size_t ahead, const std::function<uint64_t(uint32_t)>& bytes_of,
                                       uint64_t spare = 0);

}  // namespace ferry
