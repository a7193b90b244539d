#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <stdexcept>
#include <utility>

#include <blockingconcurrentqueue.h>
#include <lightweightsemaphore.h>

namespace ferry {

/// What a push or pop came to. Full, empty and closed are normal outcomes on the hot path, so they
/// are return values, not exceptions.
enum class QueueStatus {
  kOk,       // the item went in / came out
  kTimeout,  // the timeout passed first (queue full for push, empty for pop)
  kClosed,   // close() was called; the item was not taken (push) or none is left to take (pop)
};

/// A multi-producer multi-consumer FIFO with a hard capacity and close().
///
/// moodycamel's BlockingConcurrentQueue has no bound of its own; a counting semaphore of free slots
/// provides it: a push first takes a slot (waiting if there is none), a pop gives one back after
/// taking its item. So the number of items in the queue never exceeds capacity() — size() and
/// peak_size() observe exactly that count.
///
/// Order: moodycamel keeps FIFO order per producer, and a plain push() is produced by its calling
/// thread. Items pushed from different threads — even one after another — may come out in either
/// order. Where order across threads matters (a serial oneTBB node runs on whichever worker is
/// free), push through one Producer: its items come out in push order.
///
/// close() is for shutdown: it wakes every blocked pusher and popper. Pushers get kClosed. Poppers
/// still receive items that one producer pushed before the close marker it queued; once they reach
/// the marker they get kClosed and pass it on, so every popper wakes. Items still queued then are
/// destroyed with the queue.
///
/// Thread-safe: every method. Allocates: push may (moodycamel grows in blocks; std::bad_alloc when it
/// cannot, with the item not taken); pop does not.
/// Blocks: push/pop up to their timeout (kForever: until they succeed or the queue is closed).
template <typename T>
class BoundedQueue {
 public:
  using Timeout = std::chrono::microseconds;
  static constexpr Timeout kForever{-1};

  explicit BoundedQueue(size_t capacity) : slots_(static_cast<Count>(capacity)), capacity_(capacity) {
    if (capacity == 0) throw std::invalid_argument("BoundedQueue: capacity must be at least 1");
  }
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  /// A FIFO lane into the queue: items pushed through one Producer come out in the order they were
  /// pushed, even when successive pushes come from different threads. Not thread-safe: pushes through
  /// one Producer must not overlap (they are ordered, as the calls of a serial node are). Must not
  /// outlive its queue. Movable.
  class Producer {
   public:
    QueueStatus push(T&& item, Timeout timeout = kForever) {
      return queue_->push_with(std::move(item), timeout, [this](std::optional<T>&& slot) {
        return queue_->queue_.enqueue(token_, std::move(slot));
      });
    }
    QueueStatus try_push(T&& item) { return push(std::move(item), Timeout::zero()); }

   private:
    friend class BoundedQueue;
    explicit Producer(BoundedQueue& queue) : queue_(&queue), token_(queue.queue_) {}
    BoundedQueue* queue_;
    moodycamel::ProducerToken token_;
  };

  /// A new ordered lane (allocates its sub-queue). Thread-safe.
  Producer make_producer() { return Producer(*this); }

  /// Moves `item` in when a slot is free. On kTimeout or kClosed, `item` is left untouched.
  QueueStatus push(T&& item, Timeout timeout = kForever) {
    return push_with(std::move(item), timeout,
                     [this](std::optional<T>&& slot) { return queue_.enqueue(std::move(slot)); });
  }
  QueueStatus try_push(T&& item) { return push(std::move(item), Timeout::zero()); }

  /// Takes the oldest item into `out`.
  QueueStatus pop(T& out, Timeout timeout = kForever) {
    std::optional<T> slot;
    if (timeout < Timeout::zero()) {
      queue_.wait_dequeue(slot);
    } else if (!queue_.wait_dequeue_timed(slot, static_cast<std::int64_t>(timeout.count()))) {
      return closed() ? QueueStatus::kClosed : QueueStatus::kTimeout;
    }
    if (!slot) {  // the close marker: hand it on so that the next popper wakes too
      queue_.enqueue(std::nullopt);
      return QueueStatus::kClosed;
    }
    out = std::move(*slot);
    size_.fetch_sub(1, std::memory_order_acq_rel);
    slots_.signal();
    return QueueStatus::kOk;
  }
  QueueStatus try_pop(T& out) { return pop(out, Timeout::zero()); }

  /// Wakes every waiter and refuses further pushes. Idempotent. Does not block.
  void close() {
    if (closed_.exchange(true, std::memory_order_acq_rel)) return;
    queue_.enqueue(std::nullopt);
    slots_.signal(kWakeAll);
  }

  bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }
  size_t capacity() const noexcept { return capacity_; }
  /// Items in the queue now (exact at the instant of reading; never above capacity()).
  size_t size() const noexcept { return size_.load(std::memory_order_acquire); }
  /// The most items the queue has held at once.
  size_t peak_size() const noexcept { return peak_.load(std::memory_order_acquire); }

 private:
  using Count = moodycamel::LightweightSemaphore::ssize_t;
  // More wake-ups than there can ever be waiting threads; signal() only releases actual waiters.
  static constexpr Count kWakeAll = Count{1} << 30;

  template <typename Enqueue>
  QueueStatus push_with(T&& item, Timeout timeout, Enqueue&& enqueue) {
    if (closed_.load(std::memory_order_acquire)) return QueueStatus::kClosed;
    if (!wait(slots_, timeout)) return closed() ? QueueStatus::kClosed : QueueStatus::kTimeout;
    if (closed_.load(std::memory_order_acquire)) return QueueStatus::kClosed;  // woken by close()
    note_size(size_.fetch_add(1, std::memory_order_acq_rel) + 1);
    if (!enqueue(std::optional<T>(std::move(item)))) {  // moodycamel returns false when it cannot allocate
      size_.fetch_sub(1, std::memory_order_acq_rel);
      slots_.signal();
      throw std::bad_alloc();
    }
    return QueueStatus::kOk;
  }

  static bool wait(moodycamel::LightweightSemaphore& semaphore, Timeout timeout) {
    if (timeout < Timeout::zero()) return semaphore.wait();
    return semaphore.wait(static_cast<std::int64_t>(timeout.count()));
  }

  void note_size(size_t size) noexcept {
    size_t peak = peak_.load(std::memory_order_relaxed);
    while (size > peak && !peak_.compare_exchange_weak(peak, size, std::memory_order_acq_rel)) {
    }
  }

  moodycamel::BlockingConcurrentQueue<std::optional<T>> queue_;  // std::nullopt is the close marker
  moodycamel::LightweightSemaphore slots_;                       // free capacity
  const size_t capacity_;
  std::atomic<bool> closed_{false};
  std::atomic<size_t> size_{0};
  std::atomic<size_t> peak_{0};
};

}  // namespace ferry
