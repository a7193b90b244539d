#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ferry {

/// Which source each position of a weighted mixture takes (positions 0, 1, 2, ... of an epoch). In: one
/// weight per source (sources are numbered 0, 1, ... in the order given) and a mode. Out: at(position),
/// the source that position draws from and how many earlier positions drew from it, so that the caller
/// can ask that source's own sampler for the right sample. Nothing is stored per position.
///
///   kSmooth:   deterministic and periodic. Weights are read as the decimals they print as (0.7 is
///              7/10), so 0.7/0.3 repeats a pattern of 10 positions; no source is ever a whole sample
///              ahead of share * n after n positions, nor (measured) more than 1.5 behind it, and every
///              window of ceil(1 / smallest share) positions holds each source's share to within 2.
///              The first visit to an offset within the period walks there from the last checkpoint
///              (at most one period, <= 2^24 positions, once); afterwards any position costs at most a
///              checkpoint stride (1024 positions, more with thousands of sources) times O(sources).
///              See Note [smooth mixture schedule].
///   kMegatron: Megatron-LM's blending order, position for position (its BlendedDataset's
///              dataset_index and dataset_sample_index for a blend given the same weights). Not
///              periodic: reaching position p for the first time costs O(p * sources), as Megatron's
///              own index build does; afterwards any position below it costs a checkpoint stride
///              (which grows with p) times O(sources).
///              See Note [Megatron blending order].
///
/// Sources of weight 0 are never picked. The object owns a cache of checkpoints (at most 16 MiB of
/// counts, whatever the positions asked) and a cursor that makes in-order access cheap; both sit behind
/// a mutex, so every method may be called from any number of threads at once. Not copyable.
class MixtureSchedule {
 public:
  enum class Mode { kSmooth, kMegatron };

  /// What position p of the mixture takes: `source`, and how many positions before p took it (so the
  /// position is that source's sample number `before`).
  struct Pick {
    size_t source;
    uint64_t before;
  };

  /// weights: one per source, finite and >= 0, at least one > 0. Throws ferry::Error naming the first
  /// bad weight by its number (counting from 0), or saying that the list is empty or all 0. Allocates
  /// O(sources); kSmooth also reads the weights as decimals (see the Note), nothing more.
  explicit MixtureSchedule(std::vector<double> weights, Mode mode = Mode::kSmooth);

  MixtureSchedule(const MixtureSchedule&) = delete;
  MixtureSchedule& operator=(const MixtureSchedule&) = delete;

  /// The source at `position` and its count before it. Thread-safe (takes the mutex; blocks while
  /// another call holds it). For the position after the previous call's (the usual in-order walk):
  /// one pass over the sources, no allocation. Otherwise as the modes above say; reaching new
  /// positions records checkpoints (allocates).
  Pick at(uint64_t position) const;

  /// How many of the positions < `position` each source takes (the sum is `position`). Thread-safe;
  /// costs as at() does, plus the returned vector.
  std::vector<uint64_t> counts(uint64_t position) const;

  size_t sources() const noexcept { return weights_.size(); }
  /// The long-run fraction of positions each source takes; the fractions sum to 1 (up to rounding).
  /// kSmooth: the schedule's exact ratio parts / period (the weights normalized, quantized when they
  /// have no small common denominator). kMegatron: the normalized weights Megatron's loop compares,
  /// bit for bit (0 for sources of weight 0).
  const std::vector<double>& shares() const noexcept { return shares_; }
  Mode mode() const noexcept { return mode_; }
  /// kSmooth: the schedule's period (it repeats every period() positions). kMegatron: 0 (no period).
  uint64_t period() const noexcept { return period_; }
  /// The mode and the weights as given, e.g. "smooth(0.7, 0.3)" or "megatron(2, 1, 0.5)".
  std::string describe() const;

 private:
  // Where the schedule stands before one position: `offset` (the position within the period for
  // kSmooth, the position itself for kMegatron), each active source's count before it and, for
  // kSmooth, each one's excess parts * offset - period * count (Note [smooth mixture schedule]).
  struct State {
    uint64_t offset = 0;
    std::vector<uint64_t> counts;
    std::vector<int64_t> excess;
  };

  // Moves cursor_ to `offset` (mutex_ held), from the cursor or the nearest checkpoint, recording
  // checkpoints it passes for the first time.
  void seek(uint64_t offset) const;
  // Picks the active source at cursor_.offset and moves the cursor one past it; returns the active index.
  size_t step() const;
  void load_checkpoint(uint64_t index) const;
  void record_checkpoint() const;

  Mode mode_;
  std::vector<double> weights_;  // as given
  std::vector<double> shares_;   // per source
  std::vector<size_t> active_;   // the sources of weight > 0, in order; the loops run over these alone
  // kSmooth: each active source's integer part, summing to period_.
  std::vector<uint64_t> parts_;
  uint64_t period_ = 0;
  // kMegatron: the normalized weights of the active sources, as Megatron compares them.
  std::vector<double> rates_;

  mutable std::mutex mutex_;  // guards everything below
  mutable State cursor_;
  mutable std::vector<uint64_t> checkpoints_;  // counts before offsets 0, stride_, 2 stride_, ..., flat
  mutable uint64_t checkpoint_count_ = 0;
  mutable uint64_t stride_ = 0;
  uint64_t max_checkpoints_ = 0;
};

}  // namespace ferry
