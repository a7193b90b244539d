#pragma once

#include <exception>
#include <functional>

namespace ferry::detail {

/// The process-wide thread that runs copy submissions (CopyOptions::use_background_thread): one
/// thread, a FIFO queue, started by the first post() and joined at process exit.
///
/// One thread is enough: a submission's CPU-heavy part (packing) runs on oneTBB's workers through
/// run_copies, and its CUDA calls only queue work. FIFO keeps the copies of successive calls in the
/// order they were started, on each device's one copy stream.
///
/// A job's exception is never lost: it goes to the job's own `on_failure`, called on the worker
/// thread. Jobs still queued at process exit are not run; each gets an Error through `on_failure`
/// instead, so that nothing waits for them forever.
class CopyWorker {
 public:
  using Job = std::function<void()>;
  using Failure = std::function<void(std::exception_ptr)>;  // must not throw

  /// Queues `job`. Thread-safe; does not block (a short lock); allocates the queue entry. After
  /// process exit has begun (the worker is gone) the job runs inline on the calling thread instead.
  static void post(Job job, Failure on_failure);

  /// Jobs queued and not yet started (for tests). Thread-safe.
  static size_t queued();
};

}  // namespace ferry::detail
