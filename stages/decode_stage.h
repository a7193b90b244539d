#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/decoders/image_decode_options.h"
#include "ferry/io/formats/source.h"
#include "ferry/io/transforms/transform.h"
#include "ferry/pipeline/dataset_cache.h"
#include "ferry/pipeline/stage.h"
#include "ferry/stages/read_progress.h"

namespace ferry {

namespace detail {
class NvJpegDecoder;
}

/// Reads a sample from the source and decodes each field with its decoder (see the constructor),
/// then checks the result against the spec (dtype, fixed dims, max_length), so that a decoder's
/// mistake is reported here, naming the sample key and field, rather than as a confusing collate
/// error later. Then the sample transforms run, and their result is checked against the fields they
/// declared (fields()). A sample the dataset cache holds is neither read nor decoded: it is marked
/// cached (Note [dataset cache]). Runs on decode_threads threads at once (thread-safe: it keeps no
/// mutable state).
class DecodeStage : public SampleStage {
 public:
  /// Resolves every field's decoder now — an instance `instances` gives for that field, else the one
  /// `decoders` names, else the source's choice — and the fields the transforms make, so an unknown
  /// decoder or field, or a transform whose input does not suit it, throws ferry::Error before any
  /// thread starts. Keeps the instances (shared), not the registry.
  DecodeStage(std::shared_ptr<const Source> source, const DecoderRegistry& registry,
              const std::map<std::string, std::string, std::less<>>& decoders = {}, const FieldDecoders& instances = {},
              SampleTransforms transforms = {});
  std::string_view name() const override { return "decode"; }
  void run(SampleWork& work) override;
  /// Where the source reads groups for less (Source::reads_in_groups()): the group's samples in one call.
  bool wide_groups() const override;
  void prepare(const std::vector<SampleWork*>& samples) override;
  /// The source's, then each transform's.
  std::vector<UserCodeStats> user_code() const override;
  std::vector<SourcePartStats> source_parts() const override;
  RemoteDataStats remote_data() const override { return source_->remote_data().value_or(RemoteDataStats{}); }
  std::string sample_key(uint64_t index) const override { return source_->key(index); }
  std::vector<std::string> class_names() const override { return source_->class_names(); }
  /// The fields of the samples it hands on: the source's and its decoders' companions (an image's
  /// `<field>_window`), or what its transforms make of them.
  const std::vector<FieldSpec>& fields() const noexcept { return fields_; }
  const std::shared_ptr<const Source>& source() const noexcept { return source_; }
  const std::vector<std::shared_ptr<const Transform>>& transforms() const noexcept { return transforms_.list; }
  /// The fields whose decoder asks for the GPU's hardware decoder (a jpeg field's `device: gpu` or
  /// `auto`), with what it asks for, in the source's field order (Note [GPU JPEG decode]).
  std::vector<std::pair<std::string, ImageDecodeOptions::Device>> gpu_fields() const;
  /// Why `field` cannot be decoded on the GPU, where the sample transforms need it decoded before they run
  /// (they may read or move it: Transform::fields_used()); "" where they leave it alone.
  std::string transforms_need(const std::string& field) const;
  /// Why a dataset cache cannot keep `field`, which `decoder` decodes otherwise every epoch.
  static std::string varies_by_epoch(const std::string& field, const Decoder& decoder);
  /// Why a sample may come out otherwise in another epoch (a random crop, a random transform), so that
  /// a dataset cache would repeat its first epoch; "" when every sample comes out the same.
  std::string varies_by_epoch() const;
  /// Samples `cache` holds are not read from now on (Note [dataset cache]). Before the pipeline starts.
  void use_cache(std::shared_ptr<const DatasetCache> cache) { cache_ = std::move(cache); }
  /// Tells the source the order the run reads in (Source::read_in_order), and keeps what it returns for
  /// as long as the stage lives: a source fetching ahead follows the run until it ends.
  void read_in_order(std::shared_ptr<const ReadOrder> order) {
    reading_ahead_ = source_->read_in_order(std::move(order));
    progress_->counting(reading_ahead_ != nullptr);  // only a source that fetches ahead asks how far
  }
  /// The samples run() has taken up (read, or found in the dataset cache) and those it is still reading:
  /// where the reading is.
  std::shared_ptr<ReadProgress> progress() const noexcept { return progress_; }
  /// Each field's decoder, in the source's field order.
  const std::vector<std::shared_ptr<const Decoder>>& decoders() const noexcept { return decoders_; }

  /// Decodes `fields` (by name; each must have a JpegDecoder) with `nvjpeg` where a sample is routed to
  /// the GPU (Note [GPU JPEG decode]); `share` says which samples the split node routes there. Throws
  /// ferry::Error naming a field the source lacks or that another decoder decodes. Before the start.
  void use_gpu(std::shared_ptr<detail::NvJpegDecoder> nvjpeg, const std::vector<std::string>& fields, GpuShare share);
  GpuShare gpu_share() const override { return share_; }
  /// run() leaves a GPU-routed sample's GPU fields in SampleWork::pending when the hardware can decode the
  /// file; this decodes them all in one call and falls back to the CPU for those that fail there.
  void run_pending(const std::vector<SampleWork*>& samples,
                   const std::function<void(SampleWork&, std::exception_ptr)>& failed) override;
  size_t gpu_groups() const override;
  GpuReadiness gpu_readiness() const override;
  PipelineStats::GpuDecodeStats gpu_stats() const override;

 private:
  /// run() for field `i` of a GPU-routed sample: pending (true) or to be decoded on the CPU (false).
  bool defer(SampleWork& work, size_t i, const at::Tensor& encoded);

  /// Decodes field `i` of `work` from `encoded` on the CPU, with its companions unless told not to, and
  /// checks them.
  void decode_into(SampleWork& work, size_t i, const at::Tensor& encoded, bool with_companions = true) const;

  /// Counts sample `index` for the part of a mixed source it comes from.
  void count_part(uint64_t index);

  /// Runs the transforms on a decoded sample and checks what they made against fields_.
  void transform(SampleWork& work, const std::string& key) const;

  std::shared_ptr<const Source> source_;
  std::shared_ptr<const void> reading_ahead_;  // the source's fetching ahead, where it does
  std::shared_ptr<ReadProgress> progress_ = std::make_shared<ReadProgress>();
  std::vector<std::shared_ptr<const Decoder>> decoders_;  // one per field
  // The source's fields, then the decoders' companions (Decoder::companions()), in field order: what a
  // decoded sample holds before the transforms. companions_[f]: where field f's start, and how many.
  std::vector<FieldSpec> decoded_;
  std::vector<std::pair<size_t, size_t>> companions_;
  SampleTransforms transforms_;
  std::vector<FieldSpec> fields_;              // after the transforms
  std::shared_ptr<const DatasetCache> cache_;  // samples it holds are not read (may be null)
  // Note [GPU JPEG decode]: set by use_gpu() before the start, read-only after it.
  std::shared_ptr<detail::NvJpegDecoder> nvjpeg_;
  std::vector<bool> on_gpu_;  // per field
  GpuShare share_ = GpuShare::kNone;
  std::atomic<uint64_t> gpu_images_{0};
  std::atomic<uint64_t> cpu_images_{0};  // of GPU fields
  std::vector<SourcePartStats> parts_;   // a mixed source's (Source::mixed_parts)
  // Samples decoded from each of parts_, counted on kCountShards lines chosen by thread (shard x part),
  // so that decode threads counting the same part do not take turns on one cache line.
  static constexpr size_t kCountShards = 16;
  struct alignas(64) Counter {
    std::atomic<uint64_t> value{0};
  };
  std::vector<Counter> part_samples_;
};

}  // namespace ferry
