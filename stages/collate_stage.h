#pragma once

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/DimVector.h>

#include "ferry/io/formats/source.h"
#include "ferry/pipeline/dataset_cache.h"
#include "ferry/pipeline/stage.h"
#include "ferry/stages/pipeline_options.h"

namespace ferry {

/// Decides the batch's packed form (its BatchLayout); PackStage then copies every byte once, from
/// the decoded samples straight into the pinned slab (except those the decode threads placed there
/// already: Note [placing samples]). Fixed-shape fields are stacked (every sample
/// must have the same shape); a variable-length field is padded along dim 0 to the batch's longest
/// sample with its pad value and gets a companion `<field>_lengths` int64 [batch] tensor; a list field
/// (CollateOptions::lists) has its samples back to back, each at its own shape; a host field is
/// collated into a CPU tensor of its own, outside the buffer. Each field starts at a multiple of
/// max(min_alignment, element size).
///
/// Serial (one batch at a time); a batch of many fields is laid out on several threads (Note [wide
/// batches]). Allocates the layout and the small lengths tensors.
class CollateStage : public BatchStage {
 public:
  /// Throws ferry::Error for a pad value that does not fit its variable-length field's dtype or
  /// names no variable-length field, or a min_alignment that is not a power of two. (A fixed-length
  /// field is never padded: collate.pad_value does not apply to it.)
  CollateStage(std::vector<FieldSpec> fields, const CollateOptions& options, size_t min_alignment);
  std::string_view name() const override { return "collate"; }
  void run(BatchWork& work, const std::atomic<bool>& stop) override;
  /// Cached samples (Note [dataset cache]) take their shapes from `cache`; a plan keeps no list or host
  /// field (plan_dataset_cache()). Before the pipeline starts.
  void use_cache(std::shared_ptr<const DatasetCache> cache) { cache_ = std::move(cache); }

  /// The names of the batches' fields, in order.
  const std::shared_ptr<const BatchSchema>& schema() const noexcept { return schema_; }
  /// Packed bytes of the largest possible batch of `batch_size` samples; nullopt when a
  /// variable-length field has no max_length. Throws ferry::Error past kMaxBatchBytes.
  std::optional<size_t> max_batch_bytes(size_t batch_size) const;

  /// The batch's fixed-size fields before its first variable-length one, each with one sample's bytes and
  /// the alignment of its start, as run() lays them out: what the decode threads may place straight into
  /// the slab (Note [placing samples]).
  std::vector<SamplePlacer::Field> leading_fixed_fields() const;

  /// One element of `dtype` holding `value`, converted as torch::full converts it; throws
  /// ferry::Error naming the value and the dtype where it does not fit (e.g. -1 or 300 for uint8).
  static std::array<std::byte, 8> pad_element(double value, at::ScalarType dtype);

  /// 256 TiB: far beyond any host's memory, far below where sizes overflow.
  static constexpr uint64_t kMaxBatchBytes = uint64_t{1} << 48;

 private:
  std::vector<FieldSpec> fields_;
  std::vector<std::array<std::byte, 8>> pads_;  // per field: one element of its pad value
  size_t min_alignment_;
  std::shared_ptr<const BatchSchema> schema_;
  std::shared_ptr<const DatasetCache> cache_;
  std::vector<size_t> first_output_;  // per source field: its place among the batch's fields
  std::vector<bool> list_, host_;     // per source field: CollateOptions::lists, host

  at::IntArrayRef shape_of(const SampleWork& sample, size_t f, at::DimVector& scratch) const;
  // Field f's layout but its offset, and its lengths field's if it is variable-length. Thread-safe.
  void lay_out(size_t f, const std::vector<std::shared_ptr<SampleWork>>& samples, FieldLayout& field,
               FieldLayout* lengths) const;
  // A list field's: each sample's shape and place, back to back.
  void lay_out_list(size_t f, const std::vector<std::shared_ptr<SampleWork>>& samples, FieldLayout& field) const;
  at::Tensor collate_on_host(size_t f, const std::vector<std::shared_ptr<SampleWork>>& samples,
                             const FieldLayout& field) const;
};

}  // namespace ferry
