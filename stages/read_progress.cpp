#include "ferry/stages/read_progress.h"

#include <algorithm>
#include <utility>

namespace ferry {

void ReadProgress::count_steps(StepOf step_of) {
  std::lock_guard lock(mutex_);
  step_of_ = std::move(step_of);
}

void ReadProgress::finish(uint64_t epoch, uint64_t position) {
  if (!counting_.load(std::memory_order_acquire)) return;
  const uint64_t step = step_of_(epoch, position);
  std::lock_guard lock(mutex_);
  if (step != first_unfinished_) {
    if (step > first_unfinished_) finished_after_.insert(step);
    // A step that never comes (a sample read in another's place, and not again): past many later
    // ones, go on from the first of them.
    if (finished_after_.size() > kLostAfter) {
      first_unfinished_ = *std::min_element(finished_after_.begin(), finished_after_.end());
    } else {
      return;
    }
  } else {
    ++first_unfinished_;
  }
  for (auto next = finished_after_.find(first_unfinished_); next != finished_after_.end();
       next = finished_after_.find(first_unfinished_)) {
    finished_after_.erase(next);
    ++first_unfinished_;
  }
}

uint64_t ReadProgress::first_unfinished() const {
  std::lock_guard lock(mutex_);
  return first_unfinished_;
}

}  // namespace ferry
