#pragma once

#include <cstdint>
#include <string>

namespace ferry {

/// The order in which an epoch visits a source's samples.
///
/// index(epoch, position) is a pure function: the same arguments always give the same sample, so
/// an epoch can be replayed or resumed from any position without replaying its beginning.
/// Thread-safe (const).
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// Samples one epoch visits.
  virtual uint64_t epoch_size() const = 0;
  /// The source index of the position-th sample of `epoch` (position < epoch_size()).
  virtual uint64_t index(uint64_t epoch, uint64_t position) const = 0;
  virtual std::string describe() const = 0;
  /// Whether every epoch visits the same positions in the same order (a dataset cache then needs
  /// room for one epoch's samples only, even when a rank takes a share of them).
  virtual bool same_order_every_epoch() const { return false; }
  /// Whether every epoch visits the same set of samples, in whatever order.
  virtual bool same_samples_every_epoch() const { return true; }
  /// Samples of `epoch`'s order that all ranks together took before this rank's `position`: where a
  /// run resumed on another number of ranks goes on from. One rank's order: `position` itself.
  virtual uint64_t consumed_before(uint64_t epoch, uint64_t position) const {
    (void)epoch;
    return position;
  }
};

}  // namespace ferry
