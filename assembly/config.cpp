#include "ferry/assembly/config.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "ferry/assembly/rank_resume.h"
#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/formats/mixture_source.h"
#include "ferry/io/formats/source_registry.h"
#include "ferry/io/samplers/mixture_sampler.h"
#include "ferry/io/samplers/sequential_sampler.h"
#include "ferry/io/samplers/shard_shuffle_sampler.h"
#include "ferry/io/samplers/sharded_sampler.h"
#include "ferry/io/samplers/shuffled_sampler.h"
#include "ferry/io/transforms/transform_registry.h"
#include "ferry/io/util/dataset_paths.h"
#include "ferry/io/util/splitmix64.h"
#include "ferry/pipeline/cuda_device.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

std::shared_ptr<const SourceKind> kind_of(const SourceConfig& source) {
  std::shared_ptr<const SourceKind> kind = SourceRegistry::global().find(source.kind);
  if (!kind) {
    std::string known;
    for (const std::string& name : SourceRegistry::global().names()) known += (known.empty() ? "" : ", ") + name;
    throw Error("unknown source kind '" + source.kind + "' (registered: " + known + ")");
  }
  return kind;
}

}  // namespace

std::string Config::where(std::string_view key) const {
  std::string prefix(key);
  while (true) {
    if (const auto found = locations.find(prefix); found != locations.end()) return found->second;
    const size_t cut = prefix.find_last_of(".[");
    if (cut == std::string::npos) break;
    prefix.resize(cut);
  }
  // The root mapping is recorded under "".
  if (const auto root = locations.find(""); root != locations.end()) return root->second;
  return origin;
}

Placement resolve_placement(const SamplerConfig& sampler, const std::optional<TorchrunEnv>& env) {
  Placement placement;
  if (env) placement = Placement{env->rank, env->world_size, env->local_rank, true, env->local_world_size};
  // The config wins over the environment: a job may shard differently from how it was launched.
  if (env && sampler.world_size && !sampler.rank && *sampler.world_size != env->world_size) {
    // torchrun's RANK numbers its own WORLD_SIZE processes; it says nothing about another split.
    throw Error("sampler.world_size is " + std::to_string(*sampler.world_size) + " but torchrun's WORLD_SIZE is " +
                std::to_string(env->world_size) + ": set sampler.rank as well");
  }
  if (sampler.rank) placement.rank = *sampler.rank;
  if (sampler.world_size) placement.world_size = *sampler.world_size;
  if (placement.world_size == 0 || placement.rank >= placement.world_size) {
    throw Error("rank " + std::to_string(placement.rank) + " is not below world_size " +
                std::to_string(placement.world_size));
  }
  return placement;
}

PipelineOptions resolve_pipeline_options(const Config& config, const Placement& placement) {
  PipelineOptions options = config.pipeline;
  options.augment.seed = config.sampler.seed;  // Note [image augment]: every draw from (seed, epoch, sample)
  // Ranks must deliver the same number of batches per epoch, skips or not (Note [replacing skipped
  // samples] in pipeline/pipeline_graph.cpp).
  options.skip_replaces = placement.world_size > 1;
  // A decode thread waits for one worker at a time: more workers than threads would sit idle.
  if (options.decode_threads == 0 && config.workers.count > options.resolved_decode_threads()) {
    options.decode_threads = config.workers.count;
  }
  if (!placement.torchrun) return options;
  // decode.threads: auto takes this process's share of the host's cores, not all of them each.
  options.local_processes = static_cast<size_t>(placement.local_world_size);
  // Under torchrun each process drives the GPU of its LOCAL_RANK; "auto" on a machine without one
  // stays "auto" (the CPU).
  const std::string rank_device = "cuda:" + std::to_string(placement.local_rank);
  if (options.device == "cuda") options.device = rank_device;
  if (options.device == "auto" && gpu_build() && cuda_device_count() > 0) options.device = rank_device;
  return options;
}

std::map<std::string, std::string> batch_order(const Config& config, const Placement& placement, const Source& made) {
  std::map<std::string, std::string> order;
  const SourceConfig& source = config.source;
  order["source.kind"] = source.kind;
  order["source.size"] = std::to_string(made.size());
  for (auto& [key, value] : source_order(*kind_of(source), source.keys, made)) order[key] = std::move(value);
  // Transforms change what a sample holds; none (the usual case) records nothing, as before they existed.
  if (!config.transforms.empty()) {
    std::string transforms;
    for (const TransformConfig& transform : config.transforms) {
      transforms += transform.kind + transform.keys.yaml() + ";";
    }
    order["transforms"] = transforms;
  }
  order["batch_size"] = std::to_string(config.pipeline.batch_size);
  // Once a sample is skipped, batches hold other samples than under fail (and the saved position
  // may fall mid-batch).
  order["decode.on_error"] = config.pipeline.on_error == OnError::kSkip ? "skip" : "fail";
  order["sampler.drop_last"] = config.pipeline.drop_last ? "true" : "false";
  order["sampler.shuffle"] = config.sampler.shuffle ? "true" : "false";
  if (config.sampler.shuffle && config.sampler.shuffle_buffer > 0) {
    order["sampler.shuffle_buffer"] = std::to_string(config.sampler.shuffle_buffer);
  }
  // Keys that change nothing in this run are left out, so changing them does not block a resume.
  // The seed also draws random crops (Note [random crop]) and a transform's random numbers: other
  // draws are other bytes.
  bool random_decode = !made.same_every_epoch();  // user code drawing from (seed, epoch, index)
  for (const auto& [field, decoder] : make_field_decoders(config, made)) random_decode |= !decoder->same_every_epoch();
  for (const auto& transform : make_transforms(config).list) random_decode |= !transform->same_every_epoch();
  const AugmentOptions& augment = config.pipeline.augment;
  const bool random_augment = augment.enabled() && (augment.crops() || augment.flip > 0);
  if (config.sampler.shuffle || random_decode || random_augment) {
    order["sampler.seed"] = std::to_string(config.sampler.seed);
  }
  order["sampler.rank"] = std::to_string(placement.rank);
  order["sampler.world_size"] = std::to_string(placement.world_size);
  if (placement.world_size > 1) order["sampler.remainder"] = config.sampler.drop_remainder ? "drop" : "pad";
  return order;
}

MakeContext make_context(const Config& config) {
  MakeContext context;
  context.seed = config.sampler.seed;
  context.workers = config.workers.threads      ? 0
                    : config.workers.count != 0 ? config.workers.count
                                                : config.pipeline.resolved_decode_threads();
  context.timeout = config.workers.timeout;
  context.python = config.workers.python;
  context.remote = config.remote;
  return context;
}

std::shared_ptr<const Source> make_source(const SourceConfig& source, const MakeContext& context) {
  return make_source_of(*kind_of(source), source.keys, context);
}

FieldDecoders make_field_decoders(const Config& config, const Source& source) {
  FieldDecoders decoders;
  const std::shared_ptr<const SourceKind> kind = kind_of(config.source);
  if (!kind->decoded_fields) return decoders;
  const std::vector<FieldSpec>& specs = source.fields();
  for (const DecodedField& field : kind->decoded_fields(config.source.keys)) {
    const auto spec =
        std::find_if(specs.begin(), specs.end(), [&](const FieldSpec& s) { return s.name == field.name; });
    if (spec == specs.end()) {
      throw Error("field '" + field.name + "' is configured in the source, which " + source.describe() +
                  " does not have");
    }
    // decode.decoders may name another decoder for the field: it decodes with the field's keys.
    const auto chosen = config.pipeline.decoders.find(field.name);
    const std::string& decoder = chosen != config.pipeline.decoders.end() ? chosen->second
                                 : field.decoder.empty()                  ? spec->decoder
                                                                          : field.decoder;
    static const KeyValue kNoKeys = KeyValue::mapping({});
    const DecoderArgs args{*spec, field.keys != nullptr ? *field.keys : kNoKeys, config.sampler.seed};
    try {
      decoders.emplace(field.name, DecoderRegistry::global().make(decoder, args));
    } catch (const std::exception& e) {
      throw Error("field '" + field.name + "' (decoder '" + decoder + "'): " + cause_of(e));
    }
  }
  return decoders;
}

SampleTransforms make_transforms(const Config& config) {
  SampleTransforms transforms;
  transforms.seed = config.sampler.seed;
  const MakeContext context = make_context(config);
  for (size_t t = 0; t < config.transforms.size(); ++t) {
    const TransformConfig& transform = config.transforms[t];
    try {
      transforms.list.push_back(TransformRegistry::global().make(transform.kind, transform.keys, context));
    } catch (const std::exception& e) {
      throw Error("transform " + std::to_string(t) + " ('" + transform.kind + "'): " + cause_of(e));
    }
  }
  return transforms;
}

namespace {

// The order of one source's samples for all ranks together: shard by shard through a shuffle buffer, a
// permutation, or in order.
std::shared_ptr<const Sampler> order_of(const SamplerConfig& sampler, const Source& source, uint64_t seed) {
  std::vector<uint64_t> shards =
      sampler.shuffle && sampler.shuffle_buffer > 0 ? source.shard_sizes() : std::vector<uint64_t>{};
  if (!shards.empty()) {
    return std::make_shared<ShardShuffleSampler>(
        std::move(shards), ShardShuffleSampler::Options{seed, static_cast<size_t>(sampler.shuffle_buffer), true});
  }
  if (sampler.shuffle) return std::make_shared<ShuffledSampler>(source.size(), seed);
  return std::make_shared<SequentialSampler>(source.size());
}

// This rank's share of `order` (all ranks' order of one source), from `resume` on in its epoch.
std::shared_ptr<const Sampler> share_of(std::shared_ptr<const Sampler> order, const SamplerConfig& sampler,
                                        const Placement& placement, std::optional<ShardedSampler::Resume> resume) {
  return std::make_shared<ShardedSampler>(
      std::move(order), placement.rank, placement.world_size,
      sampler.drop_remainder ? ShardedSampler::Remainder::kDrop : ShardedSampler::Remainder::kPad, resume);
}

}  // namespace

std::shared_ptr<const Sampler> make_sampler(const SamplerConfig& sampler, const Placement& placement,
                                            const Source& source) {
  // A mixture deals its parts' samples to the ranks itself (Note [mixture order]); each part has an
  // order of its own, seeded apart so that two parts of one size are not shuffled alike.
  if (const auto* mixture = dynamic_cast<const MixtureSource*>(&source)) {
    std::vector<MixtureSampler::Part> parts;
    for (size_t k = 0; k < mixture->parts().size(); ++k) {
      const uint64_t seed = mix64(sampler.seed + kGoldenGamma * (k + 1));
      parts.push_back({order_of(sampler, *mixture->parts()[k].source, seed), mixture->offset(k)});
    }
    return std::make_shared<MixtureSampler>(mixture->schedule(), std::move(parts), mixture->epoch_samples(),
                                            placement.rank, placement.world_size, sampler.drop_remainder);
  }
  std::shared_ptr<const Sampler> order = order_of(sampler, source, sampler.seed);
  if (placement.world_size == 1) return order;
  return share_of(std::move(order), sampler, placement, std::nullopt);
}

std::shared_ptr<const Sampler> make_resumed_sampler(const SamplerConfig& sampler, const Placement& placement,
                                                    const Source& source, const ShardedSampler::Resume& resume) {
  if (dynamic_cast<const MixtureSource*>(&source) != nullptr) {
    throw Error("a mixture resumes on the number of ranks that saved it only");
  }
  return share_of(order_of(sampler, source, sampler.seed), sampler, placement, resume);
}

}  // namespace ferry
