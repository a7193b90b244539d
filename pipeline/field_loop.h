#pragma once

#include <cstddef>
#include <exception>
#include <limits>
#include <mutex>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

namespace ferry {

// Note [wide batches]
// ~~~~~~~~~~~~~~~~~~~
// A batch can have thousands of fields (bench/transfer's 10 000 tensors of 1 KiB). Each field costs
// its stage a few hundred nanoseconds whatever its size: decode hands the tensor on and checks it,
// collate places it, pack lists and runs its copy, h2d makes its view (a TensorImpl, 0.3-0.4 us each
// on the H200 host). Done one after another on the stage's one thread, 10 000 fields took 1.2 ms in
// decode, 2.4 ms in collate and 3 ms in h2d: the batch's bytes were a small part of its time. Those
// loops run through for_each_field, which spreads a wide batch over the arena's threads and leaves a
// narrow one (every ordinary batch) on the stage's thread, where a task hand-off would cost more than
// it saves. The views gained least (3 ms became 1.2-1.6 ms): every view holds the one buffer's storage,
// and the threads took turns at its reference count, one cache line bounced between cores for every
// view. So h2d counts a wide batch's references on its own thread first (one uncontended increment
// each) and each view moves its reference in.
//
// The loop is isolated: the stage's thread, while it waits for the other parts, takes no task of the
// graph's own (a decode group, another stage), which would hold the serial stage up for its length.
// Exceptions: the error of the lowest field index that failed is rethrown, so which field a report
// names never depends on the threads' timing.

/// Fields from which for_each_field spreads the work over threads, and how many each task takes.
inline constexpr size_t kWideBatchFields = 256;
inline constexpr size_t kFieldsPerTask = 64;

/// Calls fn(i) for every i in [0, count): in order on this thread below kWideBatchFields, else on the
/// current arena's threads in parallel (Note [wide batches]). fn must be safe to call concurrently
/// for different i. Rethrows the exception of the lowest i whose call threw; the calls for other
/// indices may or may not have run.
template <typename Fn>
void for_each_field(size_t count, Fn&& fn) {
  if (count < kWideBatchFields) {
    for (size_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::mutex mutex;
  size_t failed_at = std::numeric_limits<size_t>::max();
  std::exception_ptr failure;
  tbb::this_task_arena::isolate([&] {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, count, kFieldsPerTask),
                      [&](const tbb::blocked_range<size_t>& range) {
                        for (size_t i = range.begin(); i != range.end(); ++i) {
                          try {
                            fn(i);
                          } catch (...) {
                            std::lock_guard lock(mutex);
                            if (i < failed_at) {
                              failed_at = i;
                              failure = std::current_exception();
                            }
                            return;  // this range's later fields would come after the failure anyway
                          }
                        }
                      });
  });
  if (failure) std::rethrow_exception(failure);
}

}  // namespace ferry
