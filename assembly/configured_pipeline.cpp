#include "ferry/assembly/configured_pipeline.h"
#include "ferry/assembly/configured_planner.h"

#include <algorithm>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "ferry/assembly/config_error.h"
#include "ferry/assembly/config_loader.h"
#include "ferry/assembly/pipeline_state_loader.h"
#include "ferry/assembly/rank_resume.h"
#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/decoders/nvjpeg_decoder.h"
#include "ferry/io/formats/source_registry.h"
#include "ferry/io/transforms/transform_registry.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/io/util/units.h"
#include "ferry/pipeline/advanced.h"
#include "ferry/pipeline/cuda_device.h"
#include "ferry/pipeline/pinned_pool.h"
#include "ferry/pipeline/thread_start.h"
#include "ferry/stages/batch_planner.h"
#include "ferry/stages/collate_stage.h"
#include "ferry/stages/dataset_cache_plan.h"
#include "ferry/stages/decode_stage.h"
#include "ferry/stages/image_augment.h"
#include "ferry/stages/standard_pipeline.h"
#include "ferry/stages/standard_stages.h"

namespace ferry {
namespace {

// Why pool.budget cannot hold the slabs a pipeline needs (PoolOptions::slabs() of `slab` bytes, each
// pinned as PinnedPool::footprint() says), or nullopt. `largest_batch` names the batch the slab size
// comes from, when it was not set.
std::optional<std::string> budget_problem(const PoolOptions& pool, size_t prefetch, size_t slab,
                                          const std::string& largest_batch) {
  if (pool.budget_bytes == 0) return std::nullopt;
  const size_t slabs = pool.slabs(prefetch);
  const std::optional<size_t> needed = PinnedPool::footprint(slab, slabs);
  if (needed && *needed <= pool.budget_bytes) return std::nullopt;
  const std::string why =
      pool.slab_count != 0 ? "slab_count " + std::to_string(slabs) : "prefetch " + std::to_string(prefetch);
  return "a budget of " + format_byte_size(pool.budget_bytes) + " holds fewer than the " + std::to_string(slabs) +
         " slabs needed (" + why + ") of " + format_byte_size(slab) +
         (largest_batch.empty() ? "" : " (the largest batch, " + largest_batch + ")") +
         (needed ? "; it needs at least " + format_byte_size(*needed) +
                       (*needed != slab * slabs ? " (each slab rounded up to a page)" : "")
                 : "");
}

// The problems check_config() finds, each located where its key was set.
struct Problems {
  const Config& config;
  std::vector<ConfigProblem> list;

  void add(const std::string& key, std::string message) {
    list.push_back({config.where(key), key, std::move(message)});
  }
  /// At a value's own place: a key inside the source's keys (a field's `device`).
  void add(const KeyValue& value, std::string message) {
    list.push_back(
        {value.where().empty() ? config.where(value.key()) : value.where(), value.key(), std::move(message)});
  }
  bool empty() const noexcept { return list.empty(); }
};

// The decode stage the config's pipeline runs: each field's decoder, then the transforms. nullopt after
// adding why it cannot be made: a decoder's problem at decode.decoders (or the source's field), a
// transform's at transforms.
std::optional<DecodeStage> checked_decoding(const Config& config, const PipelineOptions& options,
                                            const std::shared_ptr<const Source>& source, Problems& problems) {
  FieldDecoders field_decoders;
  SampleTransforms transforms;
  try {
    field_decoders = make_field_decoders(config, *source);
    transforms = make_transforms(config);
  } catch (const Error& e) {
    problems.add(e.cause().rfind("transform ", 0) == 0 ? "transforms" : "source", e.cause());
    return std::nullopt;
  }
  try {
    const DecodeStage decoders(source, DecoderRegistry::global(), options.decoders, field_decoders);
    try {
      (void)transformed_fields(decoders.fields(), transforms.list);
    } catch (const Error& e) {
      problems.add("transforms", e.cause());
      return std::nullopt;
    }
  } catch (const Error& e) {
    problems.add("decode.decoders", e.cause());
    return std::nullopt;
  }
  return std::optional<DecodeStage>(std::in_place, source, DecoderRegistry::global(), options.decoders, field_decoders,
                                    std::move(transforms));
}

// The value of a decoded field's `device` key, if the config gives one (a problem with the GPU decoder
// is reported there).
const KeyValue* device_key(const Config& config, const std::string& field) {
  const std::shared_ptr<const SourceKind> kind = SourceRegistry::global().find(config.source.kind);
  if (!kind || !kind->decoded_fields) return nullptr;
  for (const DecodedField& decoded : kind->decoded_fields(config.source.keys)) {
    if (decoded.name == field && decoded.keys != nullptr) return decoded.keys->find("device");
  }
  return nullptr;
}

// Note [GPU JPEG decode]: device: gpu needs the decoder in this build and batches on a GPU (every device of
// a group on its own); auto uses it where it can and the CPU otherwise. gpu goes neither with a dataset
// cache nor with sample transforms that use the field (they run on the CPU after the fields they use are
// decoded); with either, auto decodes on the CPU.
void check_gpu_decoding(const Config& config, const PipelineOptions& options, const DecodeStage& decode,
                        const std::vector<at::Device>& targets, Problems& problems) {
  for (const auto& [field, where] : decode.gpu_fields()) {
    const KeyValue* key = device_key(config, field);
    const auto add = [&](std::string message) {
      if (key != nullptr) {
        problems.add(*key, std::move(message));
      } else {
        problems.add("source", std::move(message));
      }
    };
    const std::string device = decode_device_name(where);
    if (options.cache.enabled() && where == ImageDecodeOptions::Device::kGpu) {
      problems.add("cache.memory", "field '" + field + "' is decoded on the GPU (device: " + device +
                                       "), which the dataset cache does not support yet: use device: cpu with a "
                                       "cache, or cache.memory: off");
    }
    if (where != ImageDecodeOptions::Device::kGpu) continue;
    if (const std::string why = decode.transforms_need(field); !why.empty()) {
      add("field '" + field + "' is to be decoded on the GPU (device: gpu), but " + why +
          ": use device: cpu or auto, or leave the transforms out");
    }
    for (const at::Device& target : targets) {
      if (!target.is_cuda()) {
        add("field '" + field + "' is to be decoded on the GPU (device: gpu), but batches go to " + target.str() +
            (config.devices.empty() ? " (transfer.device)" : " (transfer.devices)") +
            ": deliver them to a CUDA device, or use device: cpu or auto");
        break;
      }
      if (const std::string why = detail::NvJpegDecoder::unavailable_reason(); !why.empty()) {
        add("this build cannot decode JPEGs on the GPU (" + why + "): use device: cpu or auto");
        break;
      }
    }
  }
}

// What only the fields the samples end with can say: the augmented field, the pad values, the size of the
// largest batch against the slab and the pinned budget.
void check_batches(const Config& config, const PipelineOptions& options, const DecodeStage& decode,
                   const SourceKind* kind, Problems& problems) {
  const std::vector<FieldSpec>& fields = decode.fields();
  if (options.augment.enabled()) {
    try {
      (void)make_image_augment(options.augment, fields);
    } catch (const Error& e) {
      const std::string cause = e.cause();
      const std::string prefix = "augment.field: ";
      problems.add("augment.field", cause.rfind(prefix, 0) == 0 ? cause.substr(prefix.size()) : cause);
    }
  }
  if (!config.transforms.empty()) {
    // Without transforms the loader checked these names against the source's fields.
    std::string names;
    for (const FieldSpec& spec : fields) names += (names.empty() ? "" : ", ") + spec.name;
    for (const auto& [field, pad] : options.collate.pad_values) {
      const auto found =
          std::find_if(fields.begin(), fields.end(), [&](const FieldSpec& f) { return f.name == field; });
      if (found == fields.end()) {
        problems.add("collate.pad_values." + field,
                     "the samples have no field '" + field + "' after the transforms; their fields: " + names);
      } else if (!found->variable()) {
        problems.add("collate.pad_values." + field, "field '" + field + "' has a fixed length: it is never padded");
      }
    }
  }
  // Each pad value at its own key (collate.pad_value, or the field's collate.pad_values entry).
  bool pads_fit = true;
  for (const FieldSpec& spec : fields) {
    if (!spec.variable()) continue;  // never padded
    const auto custom = options.collate.pad_values.find(spec.name);
    const bool own = custom != options.collate.pad_values.end();
    try {
      (void)CollateStage::pad_element(own ? custom->second : options.collate.pad_value, spec.dtype);
    } catch (const Error& e) {
      problems.add(own ? "collate.pad_values." + spec.name : "collate.pad_value",
                   e.cause() + " (field '" + spec.name + "' is " + dtype_name(spec.dtype) + ")");
      pads_fit = false;
    }
  }
  if (!pads_fit) return;
  try {
    const CollateStage collate(fields, options.collate, options.transfer.min_alignment);
    const std::optional<size_t> largest = collate.max_batch_bytes(options.batch_size);
    const std::string batch = "batch_size " + std::to_string(options.batch_size) + " of " + decode.source()->describe();
    const PoolOptions& pool = options.pool;
    const std::optional<size_t> slab = pool.slab_size(largest);
    if (pool.slab_bytes != 0 && largest && *largest > pool.slab_bytes) {
      problems.add("pool.slab_size", "a slab of " + format_byte_size(pool.slab_bytes) +
                                         " is smaller than the largest batch, " + format_byte_size(*largest) + " (" +
                                         batch + "); use at least that, or auto");
    } else if (!slab) {
      std::string field;
      for (const FieldSpec& spec : fields) {
        if (field.empty() && spec.variable() && !spec.max_length) field = spec.name;
      }
      std::optional<KeyProblem> advice;
      if (kind != nullptr && kind->size_advice) advice = kind->size_advice(config.source.keys, field);
      if (advice) {
        problems.add(advice->key, advice->message);
      } else {
        problems.add("pool.slab_size", "field '" + field +
                                           "' is variable-length with no max_length, so the largest batch (and the "
                                           "pinned slab it needs) is unknown: set pool.slab_size to the largest "
                                           "batch's bytes, or give the field a maximum");
      }
    } else if (auto problem = budget_problem(pool, options.prefetch, *slab, pool.slab_bytes != 0 ? "" : batch)) {
      problems.add("pool.budget", *problem);
    }
  } catch (const Error& e) {
    problems.add("source.fields", e.cause());  // the fields cannot be collated as given
  }
}

}  // namespace

std::shared_ptr<const Source> check_config(const Config& config) {
  Problems problems{config};
  const auto add = [&](const std::string& key, std::string message) { problems.add(key, std::move(message)); };
  std::optional<Placement> placement;
  try {
    placement = resolve_placement(config.sampler, torchrun_env());
  } catch (const Error& e) {
    add(config.sampler.world_size && !config.sampler.rank ? "sampler.world_size" : "sampler.rank", e.cause());
  }
  // transfer.devices: every device must be usable; the checks below look at the first device's pipeline
  // (the others differ only in their device and their share of the samples, which is as large).
  std::vector<std::string> devices;
  try {
    devices = group_devices(config);
  } catch (const Error& e) {
    add("transfer.devices", e.cause());
  }
  Config first = config;
  if (!config.devices.empty() && !devices.empty()) first.pipeline.device = devices.front();
  if (placement && !config.devices.empty() && !devices.empty()) placement = group_placement(config, 0);
  const PipelineOptions options = resolve_pipeline_options(first, placement.value_or(Placement{}));
  // Every device the batches go to (a group's each), resolved once; the checks below look at each.
  std::vector<at::Device> targets;
  for (size_t d = 0; d < std::max<size_t>(devices.size(), 1); ++d) {
    try {
      targets.push_back(resolve_device(d == 0 ? options.device : devices[d]));
    } catch (const Error& e) {
      add(config.devices.empty() ? "transfer.device" : "transfer.devices", e.cause());
    }
  }
  std::shared_ptr<const Source> source;
  const std::shared_ptr<const SourceKind> kind = SourceRegistry::global().find(config.source.kind);
  try {
    source = make_source(config.source, make_context(config));
  } catch (const Error& e) {
    // An image folder's problems (no classes, an empty class) are the root's: where the kind says.
    add(kind ? kind->error_key : "source", e.cause());
  }
  if (source && placement) {
    // A run that would deliver nothing is a mistake, not a success to report.
    const uint64_t epoch = make_sampler(config.sampler, *placement, *source)->epoch_size();
    // Under transfer.devices the placement is device 0's (each device is a rank to the sampler).
    const bool group = devices.size() > 1;
    const std::string share =
        placement->world_size == 1 ? "the source has"
        : group                    ? "each of the " + std::to_string(devices.size()) + " devices" +
                      (placement->world_size > devices.size() ? " of this rank" : "") + " gets"
                : "rank " + std::to_string(placement->rank) + " of " + std::to_string(placement->world_size) + " gets";
    if (epoch == 0) {
      add("sampler.remainder", share + " no samples: the source has " + std::to_string(source->size()) +
                                   " and the remainder is dropped (use pad, or fewer " + (group ? "devices" : "ranks") +
                                   ")");
    } else if (options.drop_last && epoch < options.batch_size) {
      add("sampler.drop_last", share + " " + std::to_string(epoch) + " samples per epoch, fewer than batch_size (" +
                                   std::to_string(options.batch_size) + "): drop_last leaves no batch");
    }
  }
  if (source) {
    if (const std::optional<DecodeStage> decode = checked_decoding(config, options, source, problems)) {
      check_gpu_decoding(config, options, *decode, targets, problems);
      check_batches(config, options, *decode, kind.get(), problems);
      if (options.cache.enabled() && placement && problems.empty()) {
        // Everything the dataset cache needs, as make_pipeline() will plan it (Note [dataset cache]).
        try {
          const CollateStage collate(decode->fields(), options.collate, options.transfer.min_alignment);
          // Each device of a group keeps its own share's cache on itself.
          for (const at::Device& target : targets) {
            (void)plan_dataset_cache(*decode, options, target, *make_sampler(config.sampler, *placement, *source),
                                     collate.max_batch_bytes(options.batch_size));
          }
        } catch (const Error& e) {
          const bool size = e.cause().find("max_bytes") != std::string::npos && options.cache.max_bytes != 0;
          problems.add(size ? "cache.max_bytes" : "cache.memory", e.cause());
        }
      }
    }
  }
  if (!problems.list.empty()) throw ConfigError(std::move(problems.list));
  return source;
}

Pipeline make_pipeline(const Config& config, const std::optional<PipelineState>& resume) {
  return make_pipeline(config, check_config(config), resume);
}

Pipeline load_pipeline(const std::string& path, const std::vector<std::string>& overrides) {
  return make_pipeline(load_config(path, overrides));
}

namespace {

// Ranks are processes of their own, each writing its trace: a file each, "trace.json" -> "trace.rank3.json".
// By the process's rank: a group's devices (ranks to the sampler) share their process's file.
std::string rank_trace(const std::string& trace, const Placement& process) {
  if (trace.empty() || process.world_size <= 1) return trace;
  const size_t slash = trace.rfind('/');
  const size_t dot = trace.rfind('.');
  const std::string rank = ".rank" + std::to_string(process.rank);
  if (dot == std::string::npos || (slash != std::string::npos && dot <= slash + 1)) return trace + rank;
  return trace.substr(0, dot) + rank + trace.substr(dot);
}

// The stages and options of the pipeline `config` describes at `placement`, delivering to `device` ("" : the
// config's transfer.device), resumed at `resume`: what make_pipeline() starts, or a group's part.
PipelinePart configured_part(const Config& config, const Placement& placement, const std::string& device,
                             std::shared_ptr<const Source> source, const std::optional<PipelineState>& resume) {
  if (!source) throw Error("make_pipeline: no source (pass what check_config() returned)");
  Config placed = config;
  if (!device.empty()) placed.pipeline.device = device;
  PipelineOptions options = resolve_pipeline_options(placed, placement);
  options.order = batch_order(placed, placement, *source);
  options.trace = rank_trace(options.trace, resolve_placement(config.sampler, torchrun_env()));
  if (resume) {
    // Another order would deliver other samples under the same batch numbers: refuse, key by key.
    // Both ways: a key only the saved run had (a setting this config leaves at its default) differs too.
    // Which ranks share the order is not such a key: resume_on_ranks() deals the rest to these.
    std::vector<ConfigProblem> problems;
    std::map<std::string, std::string> keys = resume->order;
    keys.insert(options.order.begin(), options.order.end());
    for (const auto& entry : keys) {
      const std::string& key = entry.first;
      const auto saved = resume->order.find(key);
      const auto now = options.order.find(key);
      // One rank records no remainder: it has none to keep.
      if (rank_order_key(key) ||
          (key == "sampler.remainder" && (saved == resume->order.end() || now == options.order.end()))) {
        continue;
      }
      const std::string before = saved == resume->order.end() ? "(not recorded)" : saved->second;
      const std::string value = now == options.order.end() ? "(not set)" : now->second;
      if (before != value) {
        problems.push_back({config.where(key), key,
                            "the saved state comes from a run with '" + before + "', this config has '" + value +
                                "': resuming would deliver other samples"});
      }
    }
    if (!problems.empty()) throw ConfigError(std::move(problems));
  }
  std::optional<RankResume> moved;
  if (resume) moved = resume_on_ranks(*resume, placed, options, placement, *source);
  std::shared_ptr<const Sampler> sampler =
      moved && moved->sampler ? make_resumed_sampler(placed.sampler, placement, *source, *moved->sampler)
                              : make_sampler(placed.sampler, placement, *source);
  if (resume) {
    const PipelineState& state = moved ? moved->state : *resume;
    options.first_batch = state.next_batch;
    options.start = state.next;
  }
  const FieldDecoders field_decoders = make_field_decoders(placed, *source);
  PipelinePart part;
  part.stages =
      make_standard_stages(std::move(source), options, std::move(sampler), field_decoders, make_transforms(placed));
  part.options = std::move(options);
  return part;
}

}  // namespace

Pipeline make_pipeline(const Config& config, std::shared_ptr<const Source> source,
                       const std::optional<PipelineState>& resume) {
  const Placement placement = resolve_placement(config.sampler, torchrun_env());
  PipelinePart part = configured_part(config, placement, "", std::move(source), resume);
  return pipeline_from_stages(std::move(part.stages), std::move(part.options));
}

std::vector<std::string> group_devices(const Config& config) {
  if (config.devices.empty()) return {config.pipeline.device};
  if (config.devices.size() == 1 && config.devices.front() == "all") {
    if (!gpu_build()) throw Error("transfer.devices: all needs GPU support, but this is a " + build_description());
    // torchrun's processes of one host would each feed every GPU.
    if (const std::optional<TorchrunEnv> env = torchrun_env(); env && env->local_world_size > 1) {
      throw Error("transfer.devices: all under torchrun with " + std::to_string(env->local_world_size) +
                  " processes on this host would feed every GPU from each of them: give each process its own "
                  "devices (a list), or one device (transfer.device: cuda, which is cuda:$LOCAL_RANK)");
    }
    const int count = cuda_device_count();
    if (count == 0) throw Error("transfer.devices: all found no GPU: " + cuda_unavailable_reason());
    std::vector<std::string> devices;
    for (int index = 0; index < count; ++index) devices.push_back("cuda:" + std::to_string(index));
    return devices;
  }
  return config.devices;
}

std::string requested_devices(const Config& config) {
  const auto written = config.values.find("transfer.devices");
  return config.devices.empty() || written == config.values.end() ? config.pipeline.device : written->second;
}

Placement group_placement(const Config& config, size_t device) {
  Placement placement = resolve_placement(config.sampler, torchrun_env());
  if (config.devices.empty()) return placement;
  const uint64_t devices = group_devices(config).size();
  placement.rank = placement.rank * devices + device;
  placement.world_size *= devices;
  return placement;
}

PipelineGroup make_pipeline_group(const Config& config, std::shared_ptr<const Source> source,
                                  const std::vector<PipelineState>& resume) {
  if (!source) throw Error("make_pipeline_group: no source (pass what check_config() returned)");
  const std::vector<std::string> devices = group_devices(config);
  std::vector<Placement> placements;
  for (size_t d = 0; d < devices.size(); ++d) placements.push_back(group_placement(config, d));
  // Each device's part on a thread of its own: a GPU decoder takes about half a second to make on its
  // device (kNow), and four of them one after another held a 4-GPU group's first batch back by 2 s.
  std::vector<std::optional<PipelinePart>> made(devices.size());
  std::vector<std::exception_ptr> failures(devices.size());
  auto make_part = [&](size_t d) {
    try {
      // States of another number of devices: every device resumes from the first device's, as every rank
      // may from rank 0's (Note [resuming on other ranks]).
      const std::optional<PipelineState> state = resume.empty()                    ? std::nullopt
                                                 : resume.size() == devices.size() ? std::optional(resume[d])
                                                                                   : std::optional(resume.front());
      made[d].emplace(configured_part(config, placements[d], config.devices.empty() ? "" : devices[d], source, state));
    } catch (...) {
      failures[d] = std::current_exception();
    }
  };
  if (devices.size() == 1) {
    make_part(0);
  } else {
    std::vector<std::thread> threads;
    try {
      for (size_t d = 0; d < devices.size(); ++d) {
        threads.push_back(detail::start_thread("a thread to make the pipeline of " + devices[d] + " (transfer.devices)",
                                               [&make_part, d] { make_part(d); }));
      }
    } catch (...) {  // no thread to start one on: the ones started are joined before the locals they use go
      for (std::thread& thread : threads) thread.join();
      throw;
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);  // the first device's problem; the parts made are freed
  }
  std::vector<PipelinePart> parts;
  parts.reserve(devices.size());
  for (std::optional<PipelinePart>& part : made) parts.push_back(std::move(*part));
  // One pool of decode threads for the whole group: decode.threads (auto: this process's share of the
  // cores), at most the samples the group's pipelines have in flight together.
  EngineOptions whole = parts.front().options;
  whole.batch_size *= parts.size();
  const size_t threads = whole.resolved_decode_threads();
  return pipeline_group_from_parts(std::move(parts), threads);
}

PipelineGroup make_pipeline_group(const Config& config, const std::vector<PipelineState>& resume) {
  return make_pipeline_group(config, check_config(config), resume);
}

std::vector<PipelineState> starting_states(const Config& config, const Source& source,
                                           const std::vector<PipelineState>& resume) {
  if (!resume.empty()) {
    // Where the states point, as a group resumed from them gives it before its first step: without the
    // batch they name as last delivered (that was another run's) and the file they came from.
    std::vector<PipelineState> states = resume;
    for (PipelineState& state : states) {
      state.last_epoch.reset();
      state.last_index.reset();
      state.origin.clear();
    }
    return states;
  }
  const std::vector<std::string> devices = group_devices(config);
  std::vector<PipelineState> states;
  states.reserve(devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    // As configured_part() records it; a fresh run starts at batch 0 of its first epoch. The order names
    // no device, so neither the config placed on device d nor the device resolved (which could start
    // CUDA) is needed: the placement among ranks is what differs between the devices.
    PipelineState state;
    state.order = batch_order(config, group_placement(config, d), source);
    states.push_back(std::move(state));
  }
  return states;
}

uint64_t planned_batches(const Config& config, const EngineOptions& options, const Source& source) {
  return planner_of(config, options, source).total_batches();
}

BatchPlanner planner_of(const Config& config, const EngineOptions& options, const Source& source) {
  const Placement placement = resolve_placement(config.sampler, torchrun_env());
  return BatchPlanner(make_sampler(config.sampler, placement, source), BatchPlanner::Options::of(options));
}

BatchPlanner planner_of(const Config& config, const EngineOptions& options, const Source& source, size_t device) {
  return BatchPlanner(make_sampler(config.sampler, group_placement(config, device), source),
                      BatchPlanner::Options::of(options));
}

}  // namespace ferry
