#pragma once

#include <cstddef>
#include <memory>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

namespace ferry::detail {

/// The threads a pipeline's graph runs on: one oneTBB arena. A pipeline makes its own; the pipelines of
/// a PipelineGroup (one per device) share one, so that one pool of decode threads serves every device
/// and a device whose batch is slower to decode borrows the threads the others are not using.
class SharedArena {
 public:
  /// An arena of `slots` threads. Raises oneTBB's process-wide thread limit (the core count by default)
  /// while it lives, where it is lower: I/O-bound decoders want more threads than cores. Throws
  /// ferry::Error when another tbb::global_control holds oneTBB to one thread (nothing would run).
  explicit SharedArena(size_t slots);
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  tbb::task_arena& arena() noexcept { return arena_; }
  size_t slots() const noexcept { return slots_; }

 private:
  size_t slots_;
  std::unique_ptr<tbb::global_control> parallelism_;
  tbb::task_arena arena_;
};

}  // namespace ferry::detail
