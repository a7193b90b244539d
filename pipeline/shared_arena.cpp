#include "ferry/pipeline/shared_arena.h"

#include <oneapi/tbb/info.h>

#include "ferry/pipeline/error.h"
#include "ferry/pipeline/thread_start.h"

namespace ferry::detail {
namespace {

// The limit counts one external thread beside the workers, hence the + 1.
std::unique_ptr<tbb::global_control> raise_parallelism(size_t slots) {
  if (slots + 1 <= static_cast<size_t>(tbb::info::default_concurrency())) return nullptr;
  return std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, slots + 1);
}

size_t checked(size_t slots) {
  // Made now, on this thread, where a failure is an error: oneTBB makes its workers later, one from
  // another, and ends the process when one cannot be made (thread_start.h).
  check_threads_can_start(slots, "the pipeline's " + std::to_string(slots) +
                                     " worker threads (its decode threads, decode.threads, and one per stage)");
  // Another tbb::global_control in the process can hold the limit lower (the smallest one wins); at 1
  // there is no worker at all and nothing would ever run.
  if (tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism) < 2) {
    throw Error(
        "oneTBB is limited to one thread in this process (a tbb::global_control); the pipeline needs worker threads");
  }
  return slots;
}

}  // namespace

SharedArena::SharedArena(size_t slots)
    : slots_(slots),
      parallelism_(raise_parallelism(slots)),
      arena_(static_cast<int>(checked(slots)), /*reserved_for_masters=*/0) {}

}  // namespace ferry::detail
