#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/pinned_pool.h"

namespace ferry {

struct StageStats {
  std::string name;
  uint64_t items = 0;         // samples for decode, batches for the others
  double busy_seconds = 0.0;  // summed over threads: decode can exceed wall time
};

/// A snapshot of a running (or finished) pipeline. Cheap to take; safe from any thread.
struct PipelineStats {
  std::string device;
  size_t decode_threads = 0;
  size_t prefetch = 0;
  double elapsed_seconds = 0.0;        // since the pipeline started
  uint64_t batches = 0;                // handed to the consumer
  uint64_t samples = 0;
  uint64_t bytes = 0;                  // field bytes handed to the consumer
  double consumer_wait_seconds = 0.0;  // time next() spent blocked waiting for a batch
  std::vector<StageStats> stages;      // in pipeline order
  size_t ready_queue_peak = 0;         // most batches waiting for the consumer at once
  PinnedPoolStats pool;
};

}  // namespace ferry
