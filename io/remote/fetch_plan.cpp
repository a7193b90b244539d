#include "ferry/io/remote/fetch_plan.h"

#include <algorithm>
#include <unordered_set>

namespace ferry {

// Note [fetching ahead, fetching least]
//
// The cache knows the reads ahead, so it can do as few fetches as any cache of its size could: when room
// is needed, drop the extent read again furthest ahead (Belady's rule). Fetching ahead fights with that:
// to fetch an extent early, something is dropped early, before Belady's rule would choose at the time
// of need, and a drop chosen early can cost a fetch more later (the extent just read, which Belady's
// rule would drop, is still being read; dropping the next best instead loses an extent kept for later).
//
// So the plan replays Belady's rule over the reads ahead, from what the cache holds now: the misses it
// meets, in order, each with the extents it drops. A miss is fetched now where none of its drops is read
// before it is needed: dropping them now or then is the same (the "conservative" rule of Cao, Felten,
// Karlin and Li's work on prefetching and caching, which fetches exactly as often as Belady's rule).
// The first miss that fails this would make the reading wait for it; it is fetched now anyway where
// dropping instead the extents read furthest ahead among those not read before it costs no fetch more
// over the reads ahead (both futures replayed), or no more than the cache's spare: one fetch beyond the
// fewest per kFetchesPerSpare done. Read in order, a cache smaller than the data keeps one slot turning
// over and the rest for the next epoch, and a fetch ahead needs a second turning slot: that costs about
// one fetch an epoch, and then no reading waits.
//
// The plan is redone as the reading moves (ShardCache::refresh_plan()); fetches already under way are
// part of what the cache holds and cannot be dropped.

namespace {

constexpr size_t kComparedStarts = 4096;  // reads replayed, at most, to compare two choices

// Belady's rule played over the reads ahead: what the cache holds as it goes.
class Replay {
 public:
  Replay(const ReadsAhead& reads, const std::vector<HeldExtent>& held, uint64_t capacity,
         const std::function<uint64_t(uint32_t)>& bytes_of)
      : reads_(reads), capacity_(capacity), bytes_of_(bytes_of) {
    for (const HeldExtent& extent : held) add(extent);
  }

  // Plays the runs of reads in order, `starts` of them at most, and only those of the extents read now
  // and the next `extents` after them, until room cannot be made (stuck() says so then); records the
  // misses in `misses` where given. Returns how many misses it met.
  size_t play(size_t starts, std::vector<PlannedFetch>* misses, size_t extents = SIZE_MAX) {
    size_t met = 0, seen = 0;
    std::unordered_set<uint32_t> read;
    reads_.for_each_start([&](uint64_t step, uint32_t id) {
      if (seen++ == starts) return false;
      // The extents read now, and `extents` more.
      if (extents != SIZE_MAX && step != 0 && read.insert(id).second && read.size() > extents) return false;
      if (const auto present = by_id_.find(id); present != by_id_.end()) {
        held_[present->second].extent.recency = kPlayed + step;
        return true;
      }
      PlannedFetch miss{id, step, {}, 0};
      if (!make_room(step, step, bytes_of_(id), false, miss.drops)) {
        stuck_ = true;
        return false;
      }
      hold(id, step);
      ++met;
      if (misses != nullptr) misses->push_back(std::move(miss));
      return true;
    });
    return met;
  }

  // Drops extents at step `from` until `need` more bytes fit for step `step`: those read next furthest
  // ahead first (the least recently read of those never read again), none read from `from` to `step`,
  // none pinned where the drops are made `now` (later, what is being fetched now has arrived). Whether
  // they fit.
  bool make_room(uint64_t from, uint64_t step, uint64_t need, bool now, std::vector<HeldExtent>& drops) {
    while (capacity_ != 0 && used_ + need > capacity_) {
      size_t pick = held_.size();
      uint64_t furthest = 0;
      for (size_t i = 0; i < held_.size(); ++i) {
        const HeldExtent& extent = held_[i].extent;
        if (extent.pinned && now) continue;
        const uint64_t next = next_read(held_[i], from);
        if (next <= step) continue;
        if (pick == held_.size() || next > furthest ||
            (next == furthest && extent.recency < held_[pick].extent.recency)) {
          pick = i;
          furthest = next;
        }
      }
      if (pick == held_.size()) return false;
      drops.push_back(held_[pick].extent);
      remove(pick);
    }
    return true;
  }

  // Takes in a fetch planned from this state: drops its drops and holds its extent.
  void apply(const PlannedFetch& fetch) {
    for (const HeldExtent& drop : fetch.drops) {
      const auto found = std::find_if(held_.begin(), held_.end(), [&](const Item& item) {
        return drop.key.empty() ? item.extent.id == drop.id : item.extent.key == drop.key;
      });
      if (found != held_.end()) remove(static_cast<size_t>(found - held_.begin()));
    }
    hold(fetch.id, 0);
  }

  bool stuck() const noexcept { return stuck_; }

  void hold(uint32_t id, uint64_t step) { add(HeldExtent{"", id, bytes_of_(id), kPlayed + step, false}); }

 private:
  static constexpr uint64_t kPlayed = uint64_t{1} << 62;  // recency of what the replay read: after the rest

  // An extent held, with the run of reads at or after `from` that reads it next, kept between queries:
  // a query at a later step within that run needs no lookup.
  struct Item {
    HeldExtent extent;
    uint64_t from = kNoRead;
    uint64_t next = kNoRead;
    uint64_t end = kNoRead;
  };

  // Its next read at or after `from`, by this process or (as far as known) another.
  uint64_t next_read(Item& item, uint64_t from) const {
    const uint64_t others = item.extent.others_next >= from ? item.extent.others_next : kNoRead;
    if (!item.extent.id) return others;
    if (from < item.from || (item.end != kNoRead && from > item.end)) {
      const auto [next, end] = reads_.next_run(*item.extent.id, from);
      item.from = from;
      item.next = next;
      item.end = end;
    }
    return std::min(std::max(item.next, from), others);
  }
  void add(HeldExtent extent) {
    used_ += extent.bytes;
    if (extent.id) by_id_[*extent.id] = held_.size();
    held_.push_back(Item{std::move(extent)});
  }
  void remove(size_t i) {
    used_ -= held_[i].extent.bytes;
    if (held_[i].extent.id) by_id_.erase(*held_[i].extent.id);
    if (i + 1 != held_.size()) {
      held_[i] = std::move(held_.back());
      if (held_[i].extent.id) by_id_[*held_[i].extent.id] = i;
    }
    held_.pop_back();
  }

  const ReadsAhead& reads_;
  uint64_t capacity_;
  const std::function<uint64_t(uint32_t)>& bytes_of_;
  std::vector<Item> held_;
  std::unordered_map<uint32_t, size_t> by_id_;
  uint64_t used_ = 0;
  bool stuck_ = false;
};

}  // namespace

void ReadsAhead::add(uint32_t id, uint64_t first, uint64_t last) { runs_[id].emplace_back(first, last); }

void ReadsAhead::add(const ReadsAhead& other) {
  for (const auto& [id, runs] : other.runs_) {
    for (const auto& [first, last] : runs) {
      if (last >= other.origin_) add(id, std::max(first, other.origin_) - other.origin_, last - other.origin_);
    }
  }
}

void ReadsAhead::finish() {
  starts_.clear();
  for (auto& [id, runs] : runs_) {
    std::sort(runs.begin(), runs.end());
    size_t kept = 0;
    for (const auto& run : runs) {
      if (kept != 0 && run.first <= runs[kept - 1].second + 1) {
        runs[kept - 1].second = std::max(runs[kept - 1].second, run.second);
      } else {
        runs[kept++] = run;
      }
    }
    runs.resize(kept);
    for (const auto& run : runs) starts_.emplace_back(run.first, id);
  }
  std::sort(starts_.begin(), starts_.end());
  set_origin(0);
}

void ReadsAhead::set_origin(uint64_t origin) {
  origin_ = origin;
  first_start_ = static_cast<size_t>(
      std::lower_bound(starts_.begin(), starts_.end(), std::pair<uint64_t, uint32_t>{origin, 0}) - starts_.begin());
  // Runs begun before the origin and not over: read at its first step.
  under_way_.clear();
  for (const auto& [id, runs] : runs_) {
    const auto run = std::lower_bound(runs.begin(), runs.end(), origin,
                                      [](const std::pair<uint64_t, uint64_t>& r, uint64_t s) { return r.second < s; });
    if (run != runs.end() && run->first < origin) under_way_.push_back(id);
  }
  std::sort(under_way_.begin(), under_way_.end());
}

std::pair<uint64_t, uint64_t> ReadsAhead::next_run(uint32_t id, uint64_t step) const {
  const auto found = runs_.find(id);
  if (found == runs_.end()) return {kNoRead, kNoRead};
  // The first run that ends at or after the step.
  const auto& runs = found->second;
  const auto run = std::lower_bound(runs.begin(), runs.end(), origin_ + step,
                                    [](const std::pair<uint64_t, uint64_t>& r, uint64_t s) { return r.second < s; });
  if (run == runs.end()) return {kNoRead, kNoRead};
  return {run->first > origin_ ? run->first - origin_ : 0, run->second - origin_};
}

uint64_t ReadsAhead::next_read(uint32_t id, uint64_t step) const {
  const uint64_t first = next_run(id, step).first;
  return first == kNoRead ? kNoRead : std::max(first, step);
}

std::unordered_map<uint32_t, uint64_t> ReadsAhead::first_reads() const {
  std::unordered_map<uint32_t, uint64_t> first;
  for (const auto& [id, runs] : runs_) {
    if (const uint64_t next = next_read(id, 0); next != kNoRead) first.emplace(id, next);
  }
  return first;
}

std::vector<PlannedFetch> plan_fetches(const ReadsAhead& reads, const std::vector<HeldExtent>& held, uint64_t capacity,
                                       size_t ahead, const std::function<uint64_t(uint32_t)>& bytes_of,
                                       uint64_t spare) {
  std::vector<PlannedFetch> misses;
  Replay(reads, held, capacity, bytes_of).play(SIZE_MAX, &misses, ahead);
  std::vector<PlannedFetch> now;
  for (const PlannedFetch& miss : misses) {
    // Dropped now or when needed, the same: none of its drops is read before it (among them, one the
    // replay fetched before this miss and drops again is: it was fetched to be read).
    const bool same_as_then = std::all_of(miss.drops.begin(), miss.drops.end(), [&](const HeldExtent& drop) {
      return !drop.pinned && drop.others_next >= miss.step && (!drop.id || reads.next_read(*drop.id, 0) >= miss.step);
    });
    if (!same_as_then) break;
    now.push_back(miss);
  }
  if (now.size() == misses.size()) return now;

  // The first miss Belady's own drops would hold back: fetched now when other drops cost no fetch more.
  const PlannedFetch& next = misses[now.size()];
  Replay then(reads, held, capacity, bytes_of);
  for (const PlannedFetch& fetch : now) then.apply(fetch);
  Replay early = then;
  PlannedFetch fetch{next.id, next.step, {}};
  if (!early.make_room(0, next.step, bytes_of(next.id), true, fetch.drops)) return now;
  early.hold(next.id, 0);
  const size_t misses_then = then.play(kComparedStarts, nullptr);
  const size_t misses_early = 1 + early.play(kComparedStarts, nullptr);
  // A replay that could not make room stopped short: its count says nothing, so the early drop is not taken.
  if (!early.stuck() && !then.stuck() && misses_early <= misses_then + spare) {
    fetch.extra = misses_early > misses_then ? misses_early - misses_then : 0;
    now.push_back(std::move(fetch));
  }
  return now;
}

}  // namespace ferry
