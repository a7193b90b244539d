#pragma once

#include <atomic>

#include <ferry/build_config.h>

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>

namespace ferry::testing {

/// Holds a CUDA stream back until the test says so: hold() queues a host function that waits for
/// release(), so everything queued on the stream after it waits too, however loaded the machine is
/// (a sleep kernel's length is a guess that a busy GPU or a slow host can outlast). The destructor
/// releases and waits for the stream, so a failing test cannot leave it blocked.
class StreamGate {
 public:
  StreamGate() = default;
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  ~StreamGate();

  /// Queues the wait on `stream`. One stream per gate.
  void hold(cudaStream_t stream);
  /// Lets the stream go on.
  void release() noexcept { open_.store(true); }

 private:
  std::atomic<bool> open_{false};
  cudaStream_t stream_ = nullptr;
  bool held_ = false;
};

}  // namespace ferry::testing

#endif
