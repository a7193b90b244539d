#include "ferry/pipeline/occupancy.h"

#include <algorithm>

namespace ferry::detail {

void Occupancy::advance(uint64_t now_ns) {
  // Callers read the clock before taking the lock, so a change may carry a time a little before
  // the last one: it counts at the last one instead of integrating backwards.
  if (now_ns <= since_ns_) return;
  const uint64_t elapsed = now_ns - since_ns_;
  area_ += (count_ <= 0 ? 0 : std::min(static_cast<uint64_t>(count_), uint64_t{capacity_})) * elapsed;
  if (count_ >= static_cast<int64_t>(capacity_)) {
    full_ns_ += elapsed;
    if (producer_waiting_) blocked_ns_ += elapsed;
  }
  since_ns_ = now_ns;
}

Occupancy::Change Occupancy::change(int delta, uint64_t now_ns, std::optional<bool> producer_waiting) {
  std::lock_guard lock(mutex_);
  advance(now_ns);
  count_ += delta;
  const size_t capped = count_ > 0 ? std::min(static_cast<size_t>(count_), capacity_) : 0;
  peak_ = std::max(peak_, capped);
  if (producer_waiting) producer_waiting_ = *producer_waiting;
  return Change{capped, std::max(now_ns, since_ns_)};
}

Occupancy::Snapshot Occupancy::snapshot(uint64_t until_ns) const {
  // Integrates the stretch since the last change on a copy: a snapshot changes nothing.
  Occupancy copy(capacity_);
  {
    std::lock_guard lock(mutex_);
    copy.count_ = count_;
    copy.producer_waiting_ = producer_waiting_;
    copy.since_ns_ = since_ns_;
    copy.area_ = area_;
    copy.full_ns_ = full_ns_;
    copy.blocked_ns_ = blocked_ns_;
    copy.peak_ = peak_;
  }
  copy.advance(until_ns);
  Snapshot snapshot;
  snapshot.mean = until_ns == 0 ? 0.0 : static_cast<double>(copy.area_) / static_cast<double>(until_ns);
  snapshot.peak = copy.peak_;
  snapshot.full_ns = copy.full_ns_;
  snapshot.blocked_ns = copy.blocked_ns_;
  return snapshot;
}

}  // namespace ferry::detail
