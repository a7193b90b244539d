#pragma once

#include <cstdint>

#include <ATen/record_function.h>

namespace ferry::detail {

/// Note [profiler ranges]
/// ~~~~~~~~~~~~~~~~~~~~~~
/// Each stage's work on each batch (a decode group, a plan, the consumer's wait in next()) is marked for
/// the profilers people already run beside training, named after the stage:
///   * an NVTX range in the domain "ferry", with the batch's index as its payload, in builds with the
///     CUDA toolkit: Nsight Systems (and any NVTX tool) shows ferry's stages on the timeline of the
///     training step's kernels;
///   * a torch.profiler user scope "ferry::<stage>" (at::RecordFunction): the consumer's waits show in
///     the training thread's profile, and the stages' threads' where the profiler records every thread.
/// Both are always on: without a profiler attached each costs a check that finds nothing to call (their
/// own designs), so nothing needs setting to profile a run. ferry's own trace (Note [trace]) needs none of
/// this and works in every build.
class ProfilerRange {
 public:
  /// Starts a range named `name` (a string that outlives the range) on this thread.
  ProfilerRange(const char* nvtx_name, const char* torch_name, uint64_t batch) noexcept;
  ~ProfilerRange();
  ProfilerRange(const ProfilerRange&) = delete;
  ProfilerRange& operator=(const ProfilerRange&) = delete;

 private:
  at::RecordFunction torch_scope_;
};

/// Whether this build emits NVTX ranges (the CUDA toolkit's NVTX headers were found).
bool nvtx_compiled() noexcept;

}  // namespace ferry::detail
