#pragma once

#include <memory>

#include "ferry/pipeline/cuda_event_pool.h"
#include "ferry/pipeline/cuda_types.h"

namespace ferry::detail {

/// ferry's copy stream and event pool for each CUDA device, process-wide, each created on first
/// use. The streams are non-blocking, so copies never serialise with the legacy default stream,
/// and one per device keeps the copies of all TensorCopy objects in submission order, which is
/// what a FIFO copy thread produces anyway.
///
/// The streams and pools are never destroyed: destroying them from a static destructor would race
/// with the CUDA runtime's own teardown at exit (libtorch leaks its streams for the same reason).
///
/// Thread-safe. The first call for a device creates the stream (a CUDA call, made under a lock
/// taken only here, so at most once per device per process); later calls do not block.
class CopyStreams {
 public:
  /// Throws ferry::CudaError when the stream cannot be created (no device, bad index).
  static CudaStreamHandle stream(int device);
  static std::shared_ptr<CudaEventPool> events(int device);
};

}  // namespace ferry::detail
