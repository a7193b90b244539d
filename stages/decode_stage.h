#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/formats/source.h"
#include "ferry/pipeline/dataset_cache.h"
#include "ferry/pipeline/stage.h"

namespace ferry {

/// Reads a sample from the source and decodes each field with its decoder (see the constructor),
/// then checks the result against the spec (dtype, fixed dims, max_length), so that a decoder's
/// mistake is reported here, naming the sample key and field, rather than as a confusing collate
/// error later. A sample the dataset cache holds is neither read nor decoded: it is marked cached (Note
/// [dataset cache]). Runs on decode_threads threads at once (thread-safe: it keeps no mutable state).
class DecodeStage : public SampleStage {
 public:
  /// Resolves every field's decoder now — an instance `instances` gives for that field, else the one
  /// `decoders` names, else the source's choice — so an unknown decoder or field throws ferry::Error
  /// before any thread starts. Keeps the instances (shared), not the registry.
  DecodeStage(std::shared_ptr<const Source> source, const DecoderRegistry& registry,
              const std::map<std::string, std::string, std::less<>>& decoders = {},
              const FieldDecoders& instances = {});
  std::string_view name() const override { return "decode"; }
  void run(SampleWork& work) override;
  /// Samples `cache` holds are not read from now on (Note [dataset cache]). Before the pipeline starts.
  void use_cache(std::shared_ptr<const DatasetCache> cache) { cache_ = std::move(cache); }
  /// Each field's decoder, in the source's field order.
  const std::vector<std::shared_ptr<const Decoder>>& decoders() const noexcept { return decoders_; }

 private:
  std::shared_ptr<const Source> source_;
  std::vector<std::shared_ptr<const Decoder>> decoders_;  // one per field
  std::shared_ptr<const DatasetCache> cache_;             // samples it holds are not read (may be null)
};

}  // namespace ferry
