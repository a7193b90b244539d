#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/pipeline/cuda_event.h"

namespace ferry::detail {

/// Copies whose results were handed out (TensorCopy::wait() on a CUDA target) but which may still be
/// running when their TensorCopy is destroyed: their staging buffers and the device tensors they
/// read are kept here until their events complete, so the destructor need not block the host.
///
/// Note [retiring a copy]
/// ~~~~~~~~~~~~~~~~~~~~~~
/// Once wait() has returned for a CUDA target, everything else a copy touches is already safe:
/// the results are ordered on the consumer's stream (and the allocator knows it), host inputs were
/// staged or (pinned, read in place) waited for, and the caller's streams of the source devices wait
/// for the copies. What remains is memory the copies still read: pinned staging from libtorch's
/// host allocator (reused at once by the next pinned allocation if freed) and device inputs and
/// temporaries (reusable by their own stream). Those are held in this list with the copies' events;
/// sweep() drops the entries whose events have completed. It runs at every TensorCopy start and
/// destruction, so the list holds at most the copies started since the last sweep that have not
/// finished; a process that stops copying keeps the last ones until it exits.
///
/// The process-wide list is never destroyed (its events belong to CopyStreams' pools, which CUDA's
/// teardown at exit must not race). Thread-safe; tensors are dropped outside the lock, on the
/// thread that sweeps (a TensorCopy's owner), never on ferry's copy thread.
class RetiredCopies {
 public:
  /// Holds `buffers` until every event of `done` has completed. Does not block; allocates.
  static void retire(std::vector<std::shared_ptr<CudaEvent>> done, std::vector<at::Tensor> buffers);
  /// Drops the entries whose copies have completed (cudaEventQuery, never a wait). An entry whose
  /// query fails (a device error) is dropped too: its copies have stopped. Does not block; throws
  /// only std::bad_alloc.
  static void sweep();
  /// Entries still held (for tests).
  static size_t pending();
};

}  // namespace ferry::detail
