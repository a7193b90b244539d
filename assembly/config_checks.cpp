// The checks across sections, once every key is read: per-field keys against the source's fields,
// decoders named for fields whose keys they do not take, and combinations of sampler and pool keys.
#include <algorithm>
#include <map>

#include "ferry/assembly/config_reader.h"
#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/formats/source_registry.h"
#include "ferry/stages/dataset_cache_plan.h"
#include "ferry/stages/decode_stage.h"

namespace ferry::detail {
namespace {

// The YAML key that sets an option of PipelineOptions, where the two names differ.
std::string yaml_key(const std::string& option) {
  static const std::map<std::string, std::string, std::less<>> kKeys{
      {"epochs", "sampler.epochs"},
      {"drop_last", "sampler.drop_last"},
      {"decode_threads", "decode.threads"},
      {"on_error", "decode.on_error"},
      {"pool.slab_bytes", "pool.slab_size"},
      {"pool.budget_bytes", "pool.budget"},
      {"transfer.min_alignment", "transfer.alignment"},
      {"transfer.max_chunk_bytes", "transfer.max_chunk"},
      {"transfer.parallel_pack_bytes", "transfer.parallel_pack"},
      {"transfer.direct_copy_bytes", "transfer.direct_copy"},
      {"augment.height", "augment.random_resized_crop.size"},
      {"augment.scale_min", "augment.random_resized_crop.scale"},
      {"augment.ratio_min", "augment.random_resized_crop.ratio"},
      {"augment.std", "augment.normalize.std"},
      {"augment.mean", "augment.normalize.mean"},
  };
  const auto found = kKeys.find(option);
  return found != kKeys.end() ? found->second : option;
}

}  // namespace

void ConfigReader::check_combinations() {
  const PipelineOptions& options = config_.pipeline;
  const std::shared_ptr<const SourceKind> kind = SourceRegistry::global().find(config_.source.kind);
  // Per-field keys must name a field of the source, where its keys tell the fields (a tar source without
  // members knows them only once a shard is read: check_config() sees them then).
  std::vector<FieldSpec> fields;
  if (source_read_ && kind && kind->fields) fields = kind->fields(config_.source.keys);
  std::vector<std::string> names;
  for (const FieldSpec& field : fields) names.push_back(field.name);
  // Transforms make other fields: collate's keys name those, and check_config() checks them.
  const bool transformed = !config_.transforms.empty();
  if (!names.empty()) {
    for (const auto& [key, name_node] : field_keys_) {
      if (transformed && key.rfind("collate.", 0) == 0) continue;
      const std::string field = key.substr(key.rfind('.') + 1);
      if (std::find(names.begin(), names.end(), field) == names.end()) {
        problem(key, name_node,
                "the source has no field '" + field + "'" + did_you_mean(field, names) +
                    "; its fields: " + list_text(names));
      }
    }
    if (!transformed) {
      for (const auto& [field, pad] : options.collate.pad_values) {
        const auto found =
            std::find_if(fields.begin(), fields.end(), [&](const FieldSpec& f) { return f.name == field; });
        if (found != fields.end() && !found->variable()) {
          problem_at("collate.pad_values." + field, "field '" + field + "' has a fixed length: it is never padded");
        }
      }
    }
  }
  // decode.decoders names another decoder for a field whose mapping sets its decoder's keys: the one named
  // must take them too.
  if (source_read_ && kind && kind->decoded_fields) {
    for (const DecodedField& field : kind->decoded_fields(config_.source.keys)) {
      const auto chosen = options.decoders.find(field.name);
      if (chosen == options.decoders.end() || field.keys == nullptr) continue;
      const std::shared_ptr<const DecoderKind> named = DecoderRegistry::global().kind(chosen->second);
      const std::shared_ptr<const DecoderKind> original = DecoderRegistry::global().kind(field.decoder);
      if (!named) continue;
      std::vector<std::string> refused;
      for (const auto& [name, value] : field.keys->entries()) {
        const bool decoder_key = original && std::any_of(original->keys.begin(), original->keys.end(),
                                                         [&](const KeySpec& spec) { return spec.name == name; });
        const bool taken =
            std::any_of(named->keys.begin(), named->keys.end(), [&](const KeySpec& spec) { return spec.name == name; });
        if (decoder_key && !taken) refused.push_back(name);
      }
      if (refused.empty()) continue;
      std::vector<std::string> takers;
      for (const auto& decoder : DecoderRegistry::global().kinds()) {
        const bool all = std::all_of(refused.begin(), refused.end(), [&](const std::string& key) {
          return std::any_of(decoder->keys.begin(), decoder->keys.end(),
                             [&](const KeySpec& spec) { return spec.name == key; });
        });
        if (all) takers.push_back(decoder->name);
      }
      std::string keys;
      for (size_t i = 0; i < refused.size(); ++i)
        keys += (i == 0 ? "" : i + 1 == refused.size() ? " or " : ", ") + refused[i];
      problem_at("decode.decoders." + field.name, "field '" + field.name + "' sets " + keys +
                                                      ", which only the decoders " + list_text(takers) +
                                                      " take; this names '" + chosen->second + "'");
    }
  }
  const SamplerConfig& sampler = config_.sampler;
  const bool shards = kind && kind->shards;
  if (sampler.shuffle_buffer > 0 && shards && !sampler.shuffle) {
    problem_at("sampler.shuffle_buffer",
               "a shuffle buffer only acts with sampler.shuffle: true (this run reads in order)");
  }
  if (sampler.shuffle_buffer > 0 && kind && !shards) {
    std::string sharded;
    for (const auto& known : SourceRegistry::global().kinds()) {
      if (known->shards) sharded += (sharded.empty() ? "" : ", ") + known->name;
    }
    problem_at("sampler.shuffle_buffer", "a shuffle buffer shuffles tar shards (source.kind: " + sharded +
                                             "); this source is '" + config_.source.kind +
                                             "', which sampler.shuffle shuffles fully");
  }
  if (sampler.rank && sampler.world_size && *sampler.rank >= *sampler.world_size) {
    problem_at("sampler.rank", "expected a rank below world_size (" + std::to_string(*sampler.world_size) +
                                   "), found " + std::to_string(*sampler.rank));
  }
  // The options' own rules (one home: PipelineOptions::problems()), at the YAML key of each option. A value
  // out of its range was refused as it was read; what is left are options that do not go together.
  for (const OptionProblem& found : options.problems()) {
    problem_at(yaml_key(found.option), "expected " + found.expected + ", found " + found.found);
  }
  // Note [dataset cache]: a cache repeats the first epoch's bytes, so no cached field may be decoded otherwise
  // every epoch (a random crop). The decoders are made here as the pipeline will make them; a decoder that
  // cannot be made is check_config()'s to report, with the source.
  if (options.cache.enabled() && source_read_ && kind && kind->decoded_fields) {
    for (const DecodedField& field : kind->decoded_fields(config_.source.keys)) {
      FieldSpec spec{.name = field.name};
      for (const FieldSpec& known : fields) {
        if (known.name == field.name) spec = known;
      }
      const auto chosen = options.decoders.find(field.name);
      static const KeyValue kNoKeys = KeyValue::mapping({});
      try {
        const auto decoder = DecoderRegistry::global().make(
            chosen != options.decoders.end() ? chosen->second : field.decoder,
            DecoderArgs{spec, field.keys != nullptr ? *field.keys : kNoKeys, config_.sampler.seed});
        if (!decoder->same_every_epoch()) {
          problem_at("cache.memory", DecodeStage::varies_by_epoch(field.name, *decoder) + kCacheRepeats);
        }
      } catch (const std::exception&) {
      }
    }
  }
  // Whether pool.budget holds the slabs is checked with the source (check_config()), where the slab size is
  // known also when it is auto; so is a cached field decoded on the GPU.
}

}  // namespace ferry::detail
