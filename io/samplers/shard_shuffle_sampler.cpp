#include "ferry/io/samplers/shard_shuffle_sampler.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <utility>

#include "ferry/io/util/splitmix64.h"
#include "ferry/pipeline/error.h"

namespace ferry {

// Note [shard shuffle: an order computed once per epoch]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Sampler's contract is a pure function index(epoch, position): resuming at any position without
// replay, and the same order for any number of decode threads or ranks, depend on it. ShuffledSampler
// meets it with a keyed bijection evaluated per position in O(1). A shuffle buffer has no such
// closed form: what leaves the buffer at step i depends on every draw before it. So:
//
//  * The first index() of an epoch simulates the whole epoch once (O(n): a shard permutation, one
//    bounded draw per sample) and stores the order, 4 bytes a sample (8 when n >= 2^32). Every later
//    index() of that epoch is an array read. Resuming at position p costs one simulation, the same
//    as reading the epoch from its start would, and reads no sample.
//  * The result depends only on (seed, epoch): all randomness comes from one splitmix64 stream seeded
//    by absorbing a domain tag, the seed and the epoch, drawn in a fixed order (the shard permutation
//    first, then the buffer's draws), with fixed-width integer arithmetic only. Neither std::shuffle
//    nor a std distribution is used: both are implementation-defined, and ranks built by different
//    compilers or standard libraries would train on different (overlapping) data.
//  * Bounded draws are unbiased: r % bound is taken only for r >= 2^64 mod bound, so every residue has
//    exactly floor(2^64 / bound) preimages (the rejection is rarer than 1 in 2^32 for bound < 2^32).
//  * The shard permutation is a Fisher-Yates shuffle over the shards; it is drawn before any buffer
//    draw, so it does not depend on buffer_size (tests use this: buffer 1 gives the stream).
//  * The stream is written straight into the order array and the buffer's outputs overwrite it in
//    place: the output for stream step i (i >= B) goes to slot i - B, which the stream has already
//    passed, so only the B-sample buffer is extra.
//
// The cache: a short list of shared epoch entries, most recently used first, guarded by cache_mutex_,
// which is held only to find or insert an entry, never while computing. An entry is computed once,
// under its own mutex, by the first caller; the others for that epoch wait on that mutex, then read.
// `ready` (release/acquire) lets later callers read without taking the entry's mutex. An evicted entry
// lives on while a caller still holds it, so eviction never pulls an order from under a reader; the
// cost is that callers cycling through more than kCachedEpochs epochs at once recompute them (still
// correct, just slower). If the computation throws (std::bad_alloc), `ready` stays false and the next
// caller tries again.

namespace {

// Absorbed first, so that this sampler's stream differs from ShuffledSampler's keys for the same seed.
constexpr uint64_t kDomain = 0x7368617264736866ULL;  // "shardshf"

constexpr uint64_t absorb(uint64_t state, uint64_t word) noexcept { return mix64(state + kGoldenGamma + mix64(word)); }

// splitmix64 (Steele, Lea, Flood 2014): passes BigCrush, period 2^64, identical on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) noexcept : state_(state) {}

  uint64_t next() noexcept { return splitmix64(state_); }

  // 2^64 mod bound: draws below it are rejected (see the Note). bound >= 1.
  static uint64_t rejection_threshold(uint64_t bound) noexcept { return (uint64_t{0} - bound) % bound; }

  // Uniform in [0, bound), unbiased; `threshold` is rejection_threshold(bound).
  uint64_t below(uint64_t bound, uint64_t threshold) noexcept {
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }
  uint64_t below(uint64_t bound) noexcept { return below(bound, rejection_threshold(bound)); }

 private:
  uint64_t state_;
};

uint64_t checked_total(const std::vector<uint64_t>& shard_sizes, const ShardShuffleSampler::Options& options) {
  if (shard_sizes.empty()) throw Error("shard shuffle sampler: no shards");
  if (options.buffer_size == 0) throw Error("shard shuffle sampler: buffer_size must be at least 1, got 0");
  uint64_t total = 0;
  for (size_t s = 0; s < shard_sizes.size(); ++s) {
    if (shard_sizes[s] > ~uint64_t{0} - total) {
      throw Error("shard shuffle sampler: the shard sizes add up to more than 2^64 - 1 samples (at shard " +
                  std::to_string(s) + ")");
    }
    total += shard_sizes[s];
  }
  if (total == 0) {
    throw Error("shard shuffle sampler: all " + std::to_string(shard_sizes.size()) + " shards are empty");
  }
  return total;
}

// Fills `order` (resized to n, the sum of the sizes) with `epoch`'s order; see the Note.
template <typename T>
void compute_order(const std::vector<uint64_t>& shard_sizes, const ShardShuffleSampler::Options& options, uint64_t n,
                   uint64_t epoch, std::vector<T>& order) {
  SplitMix64 rng(absorb(absorb(absorb(0, kDomain), options.seed), epoch));

  // 1. The shard permutation (Fisher-Yates, drawn from the back).
  const size_t shards = shard_sizes.size();
  std::vector<uint64_t> begin(shards);
  std::exclusive_scan(shard_sizes.begin(), shard_sizes.end(), begin.begin(), uint64_t{0});
  std::vector<size_t> shard_order(shards);
  std::iota(shard_order.begin(), shard_order.end(), size_t{0});
  if (options.shuffle_shards) {
    for (size_t i = shards; i-- > 1;) std::swap(shard_order[i], shard_order[rng.below(i + 1)]);
  }

  // 2. The stream, written into the order array.
  order.resize(n);
  uint64_t at = 0;
  for (const size_t s : shard_order) {
    for (uint64_t k = begin[s], end = begin[s] + shard_sizes[s]; k < end; ++k) order[at++] = static_cast<T>(k);
  }

  // 3. The buffer, in place: stream step i's output goes to slot i - B.
  const uint64_t capacity = std::min<uint64_t>(options.buffer_size, n);
  if (capacity == 1) return;  // every step would emit the sample just put in: the stream itself
  std::vector<T> buffer(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(capacity));
  const uint64_t threshold = SplitMix64::rejection_threshold(capacity);
  for (uint64_t i = capacity; i < n; ++i) {
    const T incoming = order[i];
    T& slot = buffer[rng.below(capacity, threshold)];
    order[i - capacity] = slot;
    slot = incoming;
  }
  // The drain: emit a uniformly drawn remaining sample; the last one fills its slot.
  for (uint64_t left = capacity; left > 0; --left) {
    T& slot = buffer[rng.below(left)];
    order[n - left] = slot;
    slot = buffer[left - 1];
  }
}

}  // namespace

struct ShardShuffleSampler::Epoch {
  explicit Epoch(uint64_t e) : epoch(e) {}

  const uint64_t epoch;
  std::mutex compute_mutex;        // held by the one caller computing the order
  std::atomic<bool> ready{false};  // the order is complete; written once, under compute_mutex
  std::vector<uint32_t> narrow;    // the order when the sampler is not wide_
  std::vector<uint64_t> wide;      // the order when it is
};

ShardShuffleSampler::ShardShuffleSampler(std::vector<uint64_t> shard_sizes, Options options)
    : shard_sizes_(std::move(shard_sizes)), options_(options) {
  size_ = checked_total(shard_sizes_, options_);
  wide_ = size_ > uint64_t{0xffffffff};  // the largest index, size_ - 1, needs more than 32 bits
  cache_.reserve(kCachedEpochs + 1);     // so that epoch_entry() never reallocates
}

std::shared_ptr<ShardShuffleSampler::Epoch> ShardShuffleSampler::epoch_entry(uint64_t epoch) const {
  std::shared_ptr<Epoch> evicted;  // declared first: an order is freed after the lock is released
  std::lock_guard<std::mutex> lock(cache_mutex_);
  for (size_t i = 0; i < cache_.size(); ++i) {
    if (cache_[i]->epoch == epoch) {
      std::rotate(cache_.begin(), cache_.begin() + static_cast<std::ptrdiff_t>(i),
                  cache_.begin() + static_cast<std::ptrdiff_t>(i + 1));
      return cache_.front();
    }
  }
  cache_.insert(cache_.begin(), std::make_shared<Epoch>(epoch));
  if (cache_.size() > kCachedEpochs) {
    evicted = std::move(cache_.back());
    cache_.pop_back();
  }
  return cache_.front();
}

uint64_t ShardShuffleSampler::index(uint64_t epoch, uint64_t position) const {
  if (position >= size_) {
    throw Error("shard shuffle sampler: position " + std::to_string(position) + " of epoch " + std::to_string(epoch) +
                " is outside the epoch of " + std::to_string(size_) + " samples");
  }
  const std::shared_ptr<Epoch> entry = epoch_entry(epoch);
  if (!entry->ready.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(entry->compute_mutex);
    if (!entry->ready.load(std::memory_order_relaxed)) {
      if (wide_) {
        compute_order(shard_sizes_, options_, size_, epoch, entry->wide);
      } else {
        compute_order(shard_sizes_, options_, size_, epoch, entry->narrow);
      }
      entry->ready.store(true, std::memory_order_release);
    }
  }
  return wide_ ? entry->wide[position] : entry->narrow[position];
}

std::string ShardShuffleSampler::describe() const {
  return "shard_shuffle(seed=" + std::to_string(options_.seed) + ", " + std::to_string(shard_sizes_.size()) +
         " shards, buffer=" + std::to_string(options_.buffer_size) +
         (options_.shuffle_shards ? ")" : ", shards in order)");
}

namespace detail {

std::vector<uint64_t> shard_shuffle_order(const std::vector<uint64_t>& shard_sizes,
                                          const ShardShuffleSampler::Options& options, uint64_t epoch) {
  const uint64_t n = checked_total(shard_sizes, options);
  std::vector<uint64_t> order;
  compute_order(shard_sizes, options, n, epoch, order);
  return order;
}

}  // namespace detail

}  // namespace ferry
