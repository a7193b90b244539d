#include "ferry/stages/event_wait_stage.h"

#include <chrono>
#include <thread>

#include "ferry/pipeline/cuda_event.h"

namespace ferry {
namespace {

constexpr auto kYieldFor = std::chrono::microseconds(100);
constexpr auto kSleepStep = std::chrono::microseconds(50);

}  // namespace

void EventWaitStage::run(BatchWork& work, const std::atomic<bool>& stop) {
  const std::shared_ptr<CudaEvent>& ready = work.batch.ready_event();
  if (ready) {
    const auto start = std::chrono::steady_clock::now();
    while (!ready->query()) {
      if (stop.load(std::memory_order_acquire)) return;
      if (mode_ == WaitMode::kSpin || std::chrono::steady_clock::now() - start < kYieldFor) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(kSleepStep);
      }
    }
  }
  // The slab's copy is done when the batch's is (one event for both, recorded after the last copy): the
  // pool may hand it out again at once, without polling the event itself.
  if (ready) {
    work.slab.release_completed();
  } else {
    work.slab.release();
  }
}

}  // namespace ferry
