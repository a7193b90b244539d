#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/io/formats/source.h"
#include "ferry/io/util/mixture_schedule.h"

namespace ferry {

/// One source of a mixture and its weight (any scale: weights are normalized).
struct MixturePart {
  double weight = 1;
  std::shared_ptr<const Source> source;
};

/// Several sources of the same fields as one, mixed by weight: what `source: {mix: [...]}` makes.
///
/// The samples are the parts' samples back to back (index i of part k is offset(k) + i), so that reads,
/// keys, the dataset cache and `on_error: skip` work as for any source. Which part each position of an
/// epoch takes is the schedule's (MixtureSchedule, from the weights alone: no index over the data); the
/// MixtureSampler turns positions into these indices. An epoch is samples() positions: by default as
/// many as the parts hold together, so a part weighted above its size's share is read more than once
/// per epoch (upsampled) and one below it less.
///
/// Owns: its parts' sources (shared). Immutable after construction; read() is as thread-safe as the parts'
/// reads.
class MixtureSource : public Source {
 public:
  /// Throws ferry::Error for no parts, a part without a source or without samples, weights the schedule
  /// refuses, or parts whose fields differ (naming both parts and their fields). `samples` 0: the parts'
  /// sizes summed.
  MixtureSource(std::vector<MixturePart> parts, MixtureSchedule::Mode mode, uint64_t samples);

  const std::vector<FieldSpec>& fields() const override { return parts_.front().source->fields(); }
  uint64_t size() const override { return offsets_.back(); }
  EncodedSample read(uint64_t index) const override;
  EncodedSample read_sample(uint64_t index, const SampleContext& context) const override;
  /// e.g. "mix(smooth; 0.7: tokens(a.bin, ...); 0.3: megatron(b, ...))".
  std::string describe() const override;
  /// The part's own key.
  std::string key(uint64_t index) const override;
  std::vector<std::string> class_names() const override { return parts_.front().source->class_names(); }
  bool same_every_epoch() const override;

  const std::vector<MixturePart>& parts() const noexcept { return parts_; }
  /// The index of part k's first sample.
  uint64_t offset(size_t part) const noexcept { return offsets_[part]; }
  std::vector<SourcePartStats> mixed_parts() const override;
  /// Which part index belongs to.
  size_t part_of(uint64_t index) const override;
  /// The first part's that fetches anything (the parts share one cache: the same counts).
  std::optional<RemoteDataStats> remote_data() const override;
  /// Tells each part the steps of the order that read it.
  std::shared_ptr<const void> read_in_order(std::shared_ptr<const ReadOrder> order) const override;
  const std::shared_ptr<const MixtureSchedule>& schedule() const noexcept { return schedule_; }
  /// Positions in one epoch (before a data-parallel run deals them out).
  uint64_t epoch_samples() const noexcept { return samples_; }

 private:
  std::vector<MixturePart> parts_;
  std::vector<uint64_t> offsets_;  // parts_.size() + 1 entries: each part's first index, then size()
  std::shared_ptr<const MixtureSchedule> schedule_;
  uint64_t samples_ = 0;
};

}  // namespace ferry
