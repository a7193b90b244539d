#pragma once

#include <cstdint>

namespace ferry {

/// When a batch passed each point of its way to the consumer (Note [batch path] in pipeline_stats.h), in
/// nanoseconds since its pipeline started; 0 where it has not (yet). Stamped by the node that moves the
/// batch on, read by the consumer that takes it.
struct BatchMarks {
  uint64_t planned = 0;     // the planner made its (first sample's) plan
  uint64_t collated = 0;    // collate handed it on
  uint64_t pack_start = 0;  // pack began on it
  uint64_t pack_end = 0;
  uint64_t h2d_start = 0;  // h2d began on it
  uint64_t h2d_end = 0;    // its copy submitted
  uint64_t wait_start = 0;  // the completion thread took it
  uint64_t delivered = 0;   // pushed into the ready queue

  /// Every point up to the ready queue was stamped: the batch went the whole way.
  bool complete() const noexcept {
    return collated != 0 && pack_start != 0 && pack_end != 0 && h2d_start != 0 && h2d_end != 0 && wait_start != 0 &&
           delivered != 0;
  }
};

}  // namespace ferry
