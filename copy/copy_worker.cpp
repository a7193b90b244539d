#include "ferry/copy/copy_worker.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include <pthread.h>

#include "ferry/pipeline/error.h"
#include "ferry/pipeline/thread_start.h"

namespace ferry::detail {
namespace {

struct Entry {
  CopyWorker::Job job;
  CopyWorker::Failure on_failure;
};

void run(Entry& entry) noexcept {
  try {
    entry.job();
  } catch (...) {
    entry.on_failure(std::current_exception());
  }
}

// Set once the worker has been destroyed at exit. A trivially destructible global, so that it can
// still be read by code running later in static destruction (a handle destroyed there).
std::atomic<bool> g_worker_gone{false};

class Worker {
 public:
  Worker() : thread_(detail::start_thread("start_copy's worker thread", [this] { loop(); })) {}

  ~Worker() {
    std::deque<Entry> abandoned;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      abandoned.swap(queue_);
    }
    wake_.notify_all();
    g_worker_gone.store(true, std::memory_order_release);
    for (Entry& entry : abandoned) {
      entry.on_failure(
          std::make_exception_ptr(Error(ErrorContext{"copy"}, "the copy was never submitted: the process is exiting")));
    }
    // The job running now, if any, finishes first: its copies are queued and its handle waits.
    if (thread_.joinable()) thread_.join();
  }

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // False when the worker is stopping: the caller runs the entry itself.
  bool push(Entry& entry) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return false;
      queue_.push_back(std::move(entry));
    }
    wake_.notify_one();
    return true;
  }

  size_t queued() {
    std::lock_guard lock(mutex_);
    return queue_.size();
  }

 private:
  void loop() {
    pthread_setname_np(pthread_self(), "ferry-copy");
    for (;;) {
      Entry entry;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and the destructor took what was queued
        entry = std::move(queue_.front());
        queue_.pop_front();
      }
      run(entry);  // outside the lock: post() never waits for a submission
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Entry> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the members it uses exist
};

Worker* worker() {
  if (g_worker_gone.load(std::memory_order_acquire)) return nullptr;
  static Worker instance;  // started on first use, joined by its destructor at exit
  return &instance;
}

}  // namespace

void CopyWorker::post(Job job, Failure on_failure) {
  Entry entry{std::move(job), std::move(on_failure)};
  Worker* target = worker();
  if (target != nullptr && target->push(entry)) return;
  run(entry);
}

size_t CopyWorker::queued() {
  Worker* target = worker();
  return target == nullptr ? 0 : target->queued();
}

}  // namespace ferry::detail
