#pragma once

#include <cstdint>
#include <functional>
#include <optional>

namespace ferry {

/// Where this process sits in a data-parallel job, as torchrun (torch.distributed.run) tells it.
struct TorchrunEnv {
  uint64_t rank;        // RANK: this process among all of them, < world_size
  uint64_t world_size;  // WORLD_SIZE: processes in the job, >= 1
  uint64_t local_rank;  // LOCAL_RANK: this process on its host (which GPU it drives); RANK if unset
  /// LOCAL_WORLD_SIZE: the processes on this host, which share its cores; 1 if unset.
  uint64_t local_world_size = 1;
};

/// Returns the value of an environment variable, or nullptr when it is not set (std::getenv's shape).
using EnvLookup = std::function<const char*(const char*)>;

/// Reads RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE through `lookup`. nullopt when none is set (not launched by
/// torchrun: a single process). Throws ferry::Error, naming the variable and its value, when some are
/// set but RANK or WORLD_SIZE is missing, a value is not a non-negative decimal integer, WORLD_SIZE is
/// 0, RANK or LOCAL_RANK is >= WORLD_SIZE, or LOCAL_WORLD_SIZE is 0, above WORLD_SIZE or not above
/// LOCAL_RANK: a half-configured launch must not quietly train as
/// rank 0 of 1 on every process. Allocates only to throw; as thread-safe as `lookup`.
std::optional<TorchrunEnv> torchrun_env(const EnvLookup& lookup);

/// The same, from this process's environment (std::getenv). Call it at start-up, from one thread:
/// std::getenv races with a concurrent setenv.
std::optional<TorchrunEnv> torchrun_env();

}  // namespace ferry
