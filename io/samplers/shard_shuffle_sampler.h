#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ferry/io/samplers/sampler.h"

namespace ferry {

/// WebDataset-style shuffling for tar shards: each epoch visits the shards in a shuffled order, reads
/// each shard front to back (sequential reads, friendly to disks and page caches), and passes that
/// stream through a bounded shuffle buffer.
///
/// In: the samples per shard, numbered as TarShardSource numbers them (shard 0 holds [0, size_0),
/// shard 1 the next size_1 indices, ...; empty shards are allowed), a seed and the buffer's size.
/// Out: index(epoch, position), the source index of the position-th sample of that epoch. Epoch e:
///
///  1. The shards in a permutation drawn from (seed, e) (identity when shuffle_shards is false).
///  2. The stream: the shards' sample indices in that order, each shard ascending.
///  3. The buffer: the first min(buffer_size, n) stream samples fill it; then for each further stream
///     sample, a uniformly drawn buffered sample is emitted and the incoming one takes its slot; at the
///     end the buffer is emptied in uniformly random order. buffer_size 1 keeps the stream as it is
///     (shard order only); buffer_size >= n gives a uniform shuffle of the whole epoch.
///
/// The shard order does not depend on buffer_size: a buffer_size-1 sampler with the same seed gives
/// the stream that a larger buffer shuffles. With C = min(buffer_size, n), a sample is never emitted
/// more than C - 1 positions before its stream position; how late it comes is unbounded but geometric
/// (it leaves the buffer with probability 1/C per step, so it stays about C steps).
///
/// Why an order computed per epoch: a shuffle buffer's output at step i depends on every draw before
/// it, so unlike ShuffledSampler there is no O(1) formula for one position. Simulating the epoch once
/// and caching it keeps index(epoch, position) a pure function of (seed, epoch, position), which is
/// what resuming mid-epoch without replaying samples, and agreeing across threads, ranks and
/// machines, need. See Note [shard shuffle: an order computed once per epoch] in the .cpp.
///
/// Thread-safe: any thread may call any method, from as many threads at once as it likes; the result
/// depends only on (seed, epoch, position), never on who asked first or in what order. index() takes a
/// mutex for its cache lookup (a few instructions), so it suits one planner thread or a few callers.
///
/// Memory and time: the first index() of an epoch computes that epoch's whole order, recomputed for
/// every epoch: O(n) time and n x bytes_per_sample() bytes (4 bytes a sample below 2^32 samples, 8
/// above), plus min(buffer_size, n) x bytes_per_sample() while computing. For 10 million samples in
/// 1000 shards (Release, one core of a busy 2-core host): 25-75 ms with buffers up to 10^4, about 60-90
/// ms at 10^6, about 0.25 s when the buffer holds the whole epoch (each draw a cache miss); later
/// index() calls are a lookup of about 20 ns (the test ComputingAnEpochOfTenMillionSamplesTakes prints
/// both). The kCachedEpochs most recently used epochs are kept, so steady state is up to
/// 2 x 4 x n bytes: 80 MB for 10 million samples. An epoch that fell out of the cache is recomputed
/// (same result) if asked for again, e.g. on resume.
class ShardShuffleSampler : public Sampler {
 public:
  struct Options {
    uint64_t seed = 0;
    /// Samples held by the shuffle buffer, at least 1. Values above the epoch size act as the epoch size.
    size_t buffer_size = 0;
    bool shuffle_shards = true;
  };

  /// Epochs whose order is kept: the one being read and the one before or after it (a pipeline that
  /// prefetches across an epoch boundary asks for both at once).
  static constexpr size_t kCachedEpochs = 2;

  /// Does not compute any order and allocates only the shard table. Throws ferry::Error for no shards,
  /// shards that are all empty, buffer_size 0, or sizes whose sum exceeds 2^64 - 1.
  ShardShuffleSampler(std::vector<uint64_t> shard_sizes, Options options);

  /// The sum of the shard sizes.
  uint64_t epoch_size() const override { return size_; }
  /// Thread-safe. The first call for an epoch not in the cache computes its order (O(n) time, allocates
  /// n x bytes_per_sample() bytes) while other callers for that epoch block until it is ready; every
  /// other call is a short mutex-guarded cache lookup plus an array read, no allocation. Throws
  /// ferry::Error for position >= epoch_size().
  uint64_t index(uint64_t epoch, uint64_t position) const override;
  /// "shard_shuffle(seed=7, 16 shards, buffer=1000)"; ", shards in order" before the ")" when
  /// shuffle_shards is false.
  std::string describe() const override;

  /// 4 when epoch_size() < 2^32, else 8: the bytes a cached epoch costs per sample.
  unsigned bytes_per_sample() const noexcept { return wide_ ? 8u : 4u; }
  const std::vector<uint64_t>& shard_sizes() const noexcept { return shard_sizes_; }
  const Options& options() const noexcept { return options_; }

 private:
  struct Epoch;  // one epoch's order, computed once (see the .cpp)

  std::shared_ptr<Epoch> epoch_entry(uint64_t epoch) const;

  std::vector<uint64_t> shard_sizes_;
  Options options_;
  uint64_t size_ = 0;
  bool wide_ = false;  // entries are uint64_t rather than uint32_t

  mutable std::mutex cache_mutex_;                     // guards cache_ (not the entries' contents)
  mutable std::vector<std::shared_ptr<Epoch>> cache_;  // most recently used first, at most kCachedEpochs
};

namespace detail {

/// The order ShardShuffleSampler gives `epoch`, as 64-bit indices whatever the size, computed without
/// a cache (O(n) time and 8n bytes). For tests and tools that dump an epoch; throws as the constructor.
std::vector<uint64_t> shard_shuffle_order(const std::vector<uint64_t>& shard_sizes,
                                          const ShardShuffleSampler::Options& options, uint64_t epoch);

}  // namespace detail

}  // namespace ferry
