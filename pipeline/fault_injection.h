#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

namespace ferry {

// Note [fault injection]
//
// Tests make ferry fail where reality does, at moments they choose, to prove that every failure
// surfaces with its identity (or is skipped and counted), that nothing hangs and that every slab
// returns. Faults of the data (a source read that fails, a decoder that throws or returns the wrong
// shape) and of the consumer (it stops, it throws) need no hook: tests plant them in their own
// Source, Decoder and loop. What only ferry's own code can fail is hooked here:
//   - kStagingAllocation: the pinned (or pageable) staging pool's allocation at start;
//   - kTransferCopy:      a host-to-device cudaMemcpyAsync, or the CPU transfer's copy;
//   - kEventRecord:       cudaEventRecord of a batch's or a slab's event;
//   - kEventQuery:        cudaEventQuery of one (a device error seen while waiting).
// A hook is one relaxed atomic load and a branch while nothing is armed (always, outside tests):
// fault_fires() looks at the armed mask first and takes the slow path only for an armed fault.
// An injected CUDA failure is reported as the runtime's cudaErrorUnknown, through the same check as
// a real one, so it takes the same path to the consumer.
enum class Fault : uint32_t { kStagingAllocation, kTransferCopy, kEventRecord, kEventQuery, kCount };

std::string_view fault_name(Fault fault) noexcept;

/// Arms and counts injected faults (tests only; process-wide, thread-safe).
class FaultInjector {
 public:
  /// From now on, `fault` fires on the calls numbered [after, after + times) of its hook (counted
  /// from 0 at arming), then disarms itself.
  static void arm(Fault fault, uint64_t after, uint64_t times = 1) noexcept;
  /// Disarms every fault and resets the counts.
  static void reset() noexcept;
  /// How many times `fault` fired since the last arm() or reset().
  static uint64_t fired(Fault fault) noexcept;
};

namespace detail {
extern std::atomic<uint32_t> g_armed_faults;  // bit per Fault
bool fault_fires_armed(Fault fault) noexcept;

/// True when the hook at `fault` must fail this time.
inline bool fault_fires(Fault fault) noexcept {
  if ((g_armed_faults.load(std::memory_order_acquire) & (1u << static_cast<uint32_t>(fault))) == 0) [[likely]] {
    return false;
  }
  return fault_fires_armed(fault);
}
}  // namespace detail

}  // namespace ferry
