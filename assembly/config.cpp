#include "ferry/assembly/config.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "ferry/io/decoders/image_decoder.h"
#include "ferry/io/decoders/png_decoder.h"
#include "ferry/io/samplers/sequential_sampler.h"
#include "ferry/io/samplers/shard_shuffle_sampler.h"
#include "ferry/io/samplers/sharded_sampler.h"
#include "ferry/io/samplers/shuffled_sampler.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/cuda_device.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

// The decode options of a field that change its bytes, for batch_order(): "" when it has none.
std::string jpeg_order_text(const SourceConfig& source, const std::string& field) {
  const auto found = source.jpeg.find(field);
  if (found == source.jpeg.end()) return "";
  return ":resize_shorter=" + std::to_string(found->second.resize_shorter) +
         (found->second.crop == JpegDecodeOptions::Crop::kRandom ? ":crop=random" : ":crop=center");
}

std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
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
  if (source.kind == "synthetic") {
    const SyntheticOptions& synthetic = source.synthetic;
    order["source.samples"] = std::to_string(synthetic.samples);
    order["source.seed"] = std::to_string(synthetic.seed);
    std::ostringstream fields;
    fields.precision(17);  // every double exactly: two ranges that differ must not read the same
    for (const SyntheticField& field : synthetic.fields) {
      fields << field.name << ":" << dtype_name(field.dtype) << "[";
      for (const int64_t size : field.shape) fields << size << ",";
      fields << "]";
      if (field.variable) fields << "len" << field.min_length << ".." << field.max_length;
      if (field.range) fields << "range" << field.range->first << ".." << field.range->second;
      fields << ";";
    }
    order["source.fields"] = fields.str();
  } else if (source.kind == "megatron") {
    // The file, not the text: a relative and an absolute path to one dataset are the same order.
    char resolved[PATH_MAX];
    order["source.prefix"] = ::realpath((source.megatron.prefix + ".bin").c_str(), resolved) != nullptr
                                 ? std::string(resolved)
                                 : source.megatron.prefix;
    order["source.seq_len"] = std::to_string(source.megatron.seq_len);
    order["source.add_extra_token"] = source.megatron.add_extra_token ? "true" : "false";
  } else if (source.kind == "tar") {
    std::string shards;
    for (const std::string& shard : source.tar.shards) {
      char resolved[PATH_MAX];
      shards += (::realpath(shard.c_str(), resolved) != nullptr ? std::string(resolved) : shard) + ";";
    }
    order["source.shards"] = shards;
    std::ostringstream members;
    for (const TarField& field : source.tar.fields) {
      members << field.name << ":" << field.extension << ":" << dtype_name(field.dtype) << ":" << field.decoder
              << (field.optional ? ":optional" : "") << jpeg_order_text(source, field.name) << ";";
    }
    order["source.members"] = members.str();
  } else if (source.kind == "image_folder") {
    // The folder as scanned: another root, other extensions or other classes number samples otherwise.
    const auto* folder = dynamic_cast<const ImageFolderSource*>(&made);
    const ImageFolderOptions& options = folder != nullptr ? folder->options() : source.image_folder;
    order["source.root"] = real_path(options.root);
    std::vector<std::string> extensions = options.extensions;
    std::sort(extensions.begin(), extensions.end());
    std::string extension_list;
    for (const std::string& extension : extensions) extension_list += extension + ";";
    order["source.extensions"] = extension_list;
    if (folder != nullptr) order["source.classes"] = std::to_string(folder->class_names().size());
    std::ostringstream image;
    image << options.image.decoder << "[";
    for (const int64_t size : options.image.shape) image << size << ",";
    image << "]" << jpeg_order_text(source, options.image.name);
    order["source.image"] = image.str();
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
  // The seed also draws random crops (Note [random crop]): other crops are other bytes.
  const bool random_crop = std::any_of(source.jpeg.begin(), source.jpeg.end(), [](const auto& field) {
    return field.second.crop == JpegDecodeOptions::Crop::kRandom;
  });
  const AugmentOptions& augment = config.pipeline.augment;
  const bool random_augment = augment.enabled() && (augment.crops() || augment.flip > 0);
  if (config.sampler.shuffle || random_crop || random_augment) order["sampler.seed"] = std::to_string(config.sampler.seed);
  order["sampler.rank"] = std::to_string(placement.rank);
  order["sampler.world_size"] = std::to_string(placement.world_size);
  if (placement.world_size > 1) order["sampler.remainder"] = config.sampler.drop_remainder ? "drop" : "pad";
  return order;
}

std::shared_ptr<const Source> make_source(const SourceConfig& source) {
  if (source.kind == "synthetic") return std::make_shared<SyntheticSource>(source.synthetic);
  if (source.kind == "megatron") return std::make_shared<TokenWindowSource>(source.megatron);
  if (source.kind == "tar") return std::make_shared<TarShardSource>(source.tar);
  if (source.kind == "image_folder") return std::make_shared<ImageFolderSource>(source.image_folder);
  throw Error("unknown source kind '" + source.kind + "'");
}

FieldDecoders make_field_decoders(const Config& config, const Source& source) {
  FieldDecoders decoders;
  for (const auto& [name, options] : config.source.jpeg) {
    const auto& specs = source.fields();
    const auto spec = std::find_if(specs.begin(), specs.end(), [&](const FieldSpec& s) { return s.name == name; });
    if (spec == specs.end()) {
      throw Error("resize_shorter/crop are set for field '" + name + "', which " + source.describe() +
                  " does not have");
    }
    if (spec->shape.size() != 3 || spec->shape[0] <= 0 || spec->shape[1] <= 0 || spec->shape[2] != 3) {
      throw Error("field '" + name + "': resize_shorter/crop need the field's shape to be [H, W, 3] (the crop's size)");
    }
    JpegDecodeOptions jpeg;
    jpeg.resize_shorter = options.resize_shorter;
    jpeg.crop_height = spec->shape[0];
    jpeg.crop_width = spec->shape[1];
    jpeg.crop = options.crop;
    jpeg.seed = config.sampler.seed;
    // decode.decoders may name another image decoder for the field (the loader allows only those):
    // it decodes with the field's resize and crop.
    const auto chosen = config.pipeline.decoders.find(name);
    const std::string& decoder = chosen != config.pipeline.decoders.end() ? chosen->second : options.decoder;
    if (decoder == "png") {
      decoders.emplace(name, std::make_shared<PngDecoder>(jpeg));
    } else if (decoder == "image") {
      decoders.emplace(name, std::make_shared<ImageDecoder>(jpeg));
    } else {
      decoders.emplace(name, std::make_shared<JpegDecoder>(jpeg));
    }
  }
  return decoders;
}

std::shared_ptr<const Sampler> make_sampler(const SamplerConfig& sampler, const Placement& placement,
                                            const Source& source) {
  std::shared_ptr<const Sampler> order;
  const auto* tar = dynamic_cast<const TarShardSource*>(&source);
  if (sampler.shuffle && sampler.shuffle_buffer > 0 && tar != nullptr) {
    std::vector<uint64_t> sizes(tar->shard_count());
    for (size_t shard = 0; shard < sizes.size(); ++shard) sizes[shard] = tar->shard_samples(shard).size();
    order = std::make_shared<ShardShuffleSampler>(
        std::move(sizes),
        ShardShuffleSampler::Options{sampler.seed, static_cast<size_t>(sampler.shuffle_buffer), true});
  } else if (sampler.shuffle) {
    order = std::make_shared<ShuffledSampler>(source.size(), sampler.seed);
  } else {
    order = std::make_shared<SequentialSampler>(source.size());
  }
  if (placement.world_size == 1) return order;
  return std::make_shared<ShardedSampler>(
      std::move(order), placement.rank, placement.world_size,
      sampler.drop_remainder ? ShardedSampler::Remainder::kDrop : ShardedSampler::Remainder::kPad);
}

}  // namespace ferry
