#include "ferry/pipeline/engine_options.h"

#include <algorithm>
#include <thread>

#include "ferry/pipeline/error.h"

namespace ferry {

std::optional<size_t> PoolOptions::slab_size(std::optional<size_t> largest_batch) const noexcept {
  if (slab_bytes != 0) return slab_bytes;
  if (!largest_batch) return std::nullopt;
  return std::max(*largest_batch, kMinSlabBytes);
}

size_t EngineOptions::resolved_decode_threads() const {
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t share = std::max<size_t>(1, local_processes);
  const size_t threads =
      decode_threads != 0 ? decode_threads : std::max<size_t>(1, (hardware > 2 ? hardware - 2 : 1) / share);
  // Samples in flight: the batches the tokens allow (prefetch), each batch_size samples at most.
  const size_t in_flight = std::max<size_t>(prefetch, 1) * std::max<size_t>(batch_size, 1);
  return std::min(threads, in_flight);
}

std::vector<OptionProblem> EngineOptions::problems() const {
  std::vector<OptionProblem> found;
  const auto require = [&](bool ok, const char* option, std::string expected, size_t value) {
    if (!ok) found.push_back({option, std::move(expected), std::to_string(value)});
  };
  require(batch_size >= 1 && batch_size <= kMaxBatchSize, "batch_size",
          "an integer in 1.." + std::to_string(kMaxBatchSize), batch_size);
  require(epochs >= 1, "epochs", "at least 1", epochs);
  require(prefetch >= 1 && prefetch <= kMaxPrefetch, "prefetch", "an integer in 1.." + std::to_string(kMaxPrefetch),
          prefetch);
  require(decode_threads <= kMaxDecodeThreads, "decode_threads", "0 (auto) or 1.." + std::to_string(kMaxDecodeThreads),
          decode_threads);
  require(pool.slab_count <= PoolOptions::kMaxSlabCount, "pool.slab_count",
          "0 (auto) or 1.." + std::to_string(PoolOptions::kMaxSlabCount), pool.slab_count);
  // Each batch in flight may hold a slab: fewer would let a token wait for a slab (Note [tokens]).
  require(pool.slab_count == 0 || pool.slab_count >= prefetch, "pool.slab_count",
          "at least prefetch (" + std::to_string(prefetch) + ") slabs: every batch in flight holds one",
          pool.slab_count);
  return found;
}

void EngineOptions::check() const { throw_first(problems()); }

void throw_first(const std::vector<OptionProblem>& problems) {
  if (problems.empty()) return;
  const OptionProblem& first = problems.front();
  throw Error("invalid option " + first.option + ": expected " + first.expected + ", found " + first.found);
}

}  // namespace ferry
