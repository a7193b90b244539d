#include "tests/support/stream_gate.h"

#if FERRY_HAVE_CUDART
#include <chrono>
#include <thread>

#include <ferry/pipeline/cuda_error.h>

namespace ferry::testing {

void StreamGate::hold(cudaStream_t stream) {
  stream_ = stream;
  held_ = true;
  // A host function may not call CUDA, but it may wait: CUDA runs the stream's later work after it
  // returns.
  FERRY_CUDA_CHECK(cudaLaunchHostFunc(
      stream,
      [](void* open) {
        while (!static_cast<std::atomic<bool>*>(open)->load()) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      },
      &open_));
}

StreamGate::~StreamGate() {
  release();
  if (held_) (void)cudaStreamSynchronize(stream_);  // the host function reads open_: outlive it
}

}  // namespace ferry::testing

#endif
