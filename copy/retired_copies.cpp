#include "ferry/copy/retired_copies.h"

#include <algorithm>
#include <iterator>
#include <mutex>
#include <utility>

namespace ferry::detail {

namespace {

struct Entry {
  std::vector<std::shared_ptr<CudaEvent>> done;
  std::vector<at::Tensor> buffers;
};

struct List {
  std::mutex mutex;
  std::vector<Entry> entries;
};

List& list() {
  static List* const instance = new List();  // never destroyed: Note [retiring a copy]
  return *instance;
}

bool completed(const Entry& entry) noexcept {
  try {
    for (const auto& event : entry.done) {
      if (!event->query()) return false;
    }
  } catch (...) {
    // The device reports an error: the copies are not running any more.
  }
  return true;
}

}  // namespace

void RetiredCopies::retire(std::vector<std::shared_ptr<CudaEvent>> done, std::vector<at::Tensor> buffers) {
  List& retired = list();
  std::lock_guard lock(retired.mutex);
  retired.entries.push_back(Entry{std::move(done), std::move(buffers)});
}

void RetiredCopies::sweep() {
  List& retired = list();
  std::vector<Entry> candidates;
  {
    std::lock_guard lock(retired.mutex);
    if (retired.entries.empty()) return;
    candidates.swap(retired.entries);
  }
  // Queried without the lock (no CUDA call under a lock); the finished entries are dropped here, the
  // others go back.
  const auto finished =
      std::partition(candidates.begin(), candidates.end(), [](const Entry& entry) { return !completed(entry); });
  candidates.erase(finished, candidates.end());  // frees the finished ones' memory, outside the lock
  if (candidates.empty()) return;
  std::lock_guard lock(retired.mutex);
  if (retired.entries.empty()) {
    retired.entries.swap(candidates);
  } else {
    retired.entries.insert(retired.entries.end(), std::make_move_iterator(candidates.begin()),
                           std::make_move_iterator(candidates.end()));
  }
}

size_t RetiredCopies::pending() {
  List& retired = list();
  std::lock_guard lock(retired.mutex);
  return retired.entries.size();
}

}  // namespace ferry::detail
