#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ferry/assembly/torchrun_env.h"
#include "ferry/io/decoders/decoder.h"
#include "ferry/io/formats/source.h"
#include "ferry/io/samplers/sampler.h"
#include "ferry/io/transforms/transform.h"
#include "ferry/io/util/key_schema.h"
#include "ferry/io/util/kind_registry.h"
#include "ferry/io/util/remote_options.h"
#include "ferry/stages/pipeline_options.h"

namespace ferry {

/// Where the samples come from: a source kind registered in SourceRegistry (synthetic, megatron, tar,
/// image_folder, or a program's or a plugin's own) and its keys.
struct SourceConfig {
  std::string kind = "synthetic";
  /// The `source` mapping, `kind` left out, as the loader checked it against the kind's keys.
  KeyValue keys = KeyValue::mapping({});
};

/// One entry of `transforms:`: a transform registered in TransformRegistry and its keys.
struct TransformConfig {
  std::string kind;
  KeyValue keys = KeyValue::mapping({});  // the entry, `kind` left out
};

/// The order of the samples and this process's share of them.
struct SamplerConfig {
  bool shuffle = false;  // a different permutation every epoch, from (seed, epoch)
  uint64_t seed = 0;
  /// This process's rank among world_size data-parallel ranks. Unset: from torchrun's RANK and
  /// WORLD_SIZE variables when they are set, else rank 0 of 1.
  std::optional<uint64_t> rank;
  std::optional<uint64_t> world_size;
  /// When the epoch does not divide evenly among the ranks: pad (repeat the epoch's first samples)
  /// or drop the remainder, so that every rank gets the same number of batches.
  bool drop_remainder = false;
  /// Tar shards, when shuffling: 0 shuffles the samples fully (a random permutation of every
  /// sample); N > 0 shuffles the order of the shards and passes their samples, read shard after
  /// shard, through a shuffle buffer of N samples (ShardShuffleSampler): reads stay sequential.
  uint64_t shuffle_buffer = 0;
};

/// How user Python code runs (the python source kind, python transforms): in worker processes.
struct WorkersConfig {
  size_t count = 0;      // decode.workers: processes per pipeline; 0: as many as decode threads
  bool threads = false;  // decode.workers: threads: on the decode threads of this process instead
  /// decode.timeout: how long one sample (or a worker's start) may take before its worker is stopped.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  std::string python;  // decode.python: the workers' interpreter; "": the default (python3, or ferry's own)
};

/// How `ferry run` reports on a run.
struct StatsConfig {
  enum class Progress {
    kAuto,   // a live line on a terminal, plain lines otherwise
    kLive,   // one line rewritten in place (\r) a few times a second
    kPlain,  // a new line every `interval`, for logs
    kOff,
  };
  Progress progress = Progress::kAuto;
  std::chrono::milliseconds interval{5000};  // between plain progress lines (not on a terminal)
  std::string report_path;                   // write the JSON report here ("" : none)
};

/// A whole pipeline, as a YAML file describes it (docs/config.md). A plain value: build it in code,
/// or with load_config() from a file; make_pipeline(const Config&) (stages/) runs it.
///
/// The YAML layout groups keys for people (`sampler.epochs`, `decode.threads`, `transfer.device`);
/// they land in `pipeline` (PipelineOptions), the struct the engine takes.
struct Config {
  SourceConfig source;
  SamplerConfig sampler;
  PipelineOptions pipeline;
  /// Sample transforms, run in this order on every decoded sample (`transforms:`).
  std::vector<TransformConfig> transforms;
  /// The plugins the config loaded (`plugins:`), as written; they were loaded while it was read.
  std::vector<std::string> plugins;
  /// transfer.devices: one process feeding several devices ("cpu", "cuda:N", or the one entry "all":
  /// every visible GPU), a pipeline each (Note [one process, several devices] in
  /// pipeline/pipeline_group.h; make_pipeline_group()). Empty: one device, pipeline.device.
  std::vector<std::string> devices;
  WorkersConfig workers;
  StatsConfig stats;
  /// How remote, compressed and piped data is fetched and cached (`remote:`).
  RemoteOptions remote;

  /// Where the config came from ("configs/demo.yaml", "<built-in demo>").
  std::string origin;
  /// Where each key was set: key path ("pool.slab_size", "source.fields[1].dtype") to
  /// "file:line:column" or "--set key=value". Keys left at their defaults are absent.
  std::map<std::string, std::string, std::less<>> locations;
  /// The value of each scalar key that was set, as written (in the file or by --set), by the same key
  /// paths: the config as it ran, for reports.
  std::map<std::string, std::string, std::less<>> values;

  /// The location of `key` or of its nearest enclosing key that has one, else origin.
  std::string where(std::string_view key) const;
};

/// This process's place in a data-parallel job: the config's rank and world size, else torchrun's.
struct Placement {
  uint64_t rank = 0;
  uint64_t world_size = 1;
  uint64_t local_rank = 0;        // torchrun's LOCAL_RANK: which GPU "cuda" means
  bool torchrun = false;          // launched by torchrun (its variables are set)
  uint64_t local_world_size = 1;  // torchrun's LOCAL_WORLD_SIZE: the processes sharing this host's cores
};

/// Throws ferry::Error for a malformed torchrun environment (see torchrun_env()).
Placement resolve_placement(const SamplerConfig& sampler, const std::optional<TorchrunEnv>& env);

/// The pipeline options with "auto" (on a machine with a GPU) and "cuda" turned into this rank's GPU,
/// cuda:LOCAL_RANK, under torchrun (otherwise the device passes through unchanged), and with
/// skip_replaces when there are several ranks.
PipelineOptions resolve_pipeline_options(const Config& config, const Placement& placement);

/// What decides which samples each batch holds, as text per key ("batch_size" -> "64",
/// "sampler.seed" -> "7", "source.fields" -> ...): a saved PipelineState carries it, and a resume
/// under a different order is refused naming the key. Thread counts, prefetch, device, epochs and
/// max_batches are not part of it: they change how fast or how long, not which batch comes next.
/// `source` is the source the config makes: its size is recorded too (a dataset regenerated with
/// another size is caught; one regenerated with the same size but other contents is not).
std::map<std::string, std::string> batch_order(const Config& config, const Placement& placement, const Source& source);

/// What kinds that run user code need from the config (decode.workers and its neighbours, sampler.seed).
MakeContext make_context(const Config& config);

/// The source config.source describes, made by its kind (in `context`, for a kind that needs it). Throws
/// ferry::Error when it cannot be made.
std::shared_ptr<const Source> make_source(const SourceConfig& source, const MakeContext& context = {});

/// The decoders of the fields whose decoder the config names with its keys (a tar member's resize and
/// crop, say), made by their kinds in DecoderRegistry::global() for `source`'s fields (the source the
/// config makes): instances for make_pipeline(), never registered, so two pipelines with different
/// options in one process do not clash. Throws ferry::Error for a field the source does not have or a
/// decoder that cannot decode it.
FieldDecoders make_field_decoders(const Config& config, const Source& source);

/// The transforms config.transforms names, made by their kinds in TransformRegistry::global(), seeded
/// with sampler.seed. Throws ferry::Error for one that cannot be made.
SampleTransforms make_transforms(const Config& config);

/// The order config.sampler asks for over `source`'s samples: sequential or shuffled (for tar shards
/// with a shuffle buffer: shard order and buffer), then this rank's share (ShardedSampler) when there
/// are several ranks.
std::shared_ptr<const Sampler> make_sampler(const SamplerConfig& sampler, const Placement& placement,
                                            const Source& source);

}  // namespace ferry
