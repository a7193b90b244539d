// The sections of the standard pipeline: batches, sampler, decode, collate, pool, transfer, cache,
// augment and stats, each into its part of the Config.
#include <algorithm>
#include <limits>

#include <sys/stat.h>
#include <unistd.h>

#include "ferry/assembly/config_reader.h"
#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/util/printable.h"
#include "ferry/io/util/units.h"

namespace ferry::detail {
namespace {

constexpr uint64_t kMaxInteger = uint64_t{1} << 62;
constexpr uint64_t kMaxWorkers = 256;  // decode.workers: processes per pipeline

// cuda:007 as cuda:7, so that a GPU is not listed twice under two names.
std::string canonical(const std::string& device) {
  if (device.rfind("cuda:", 0) != 0) return device;
  return "cuda:" + std::to_string(std::stoul(device.substr(5)));
}

}  // namespace

void ConfigReader::read_root(const Node& root) {
  mapping(root, "", "");
  // Plugins first: they may add the source kind, decoders and transforms the rest names.
  if (const auto node = child(root, "plugins")) read_plugins(*node);
  if (const auto source = child(root, "source")) {
    read_source(*source);
  } else {
    problem("source", root,
            "missing required key (where the samples come from, e.g. source: {kind: synthetic, fields: [...]})");
  }
  PipelineOptions& options = config_.pipeline;
  if (const auto node = child(root, "batch_size")) {
    if (auto value = integer(*node, "batch_size", 1, EngineOptions::kMaxBatchSize,
                             "an integer in 1.." + std::to_string(EngineOptions::kMaxBatchSize)))
      options.batch_size = *value;
  }
  if (const auto node = child(root, "prefetch")) {
    if (auto value = integer(*node, "prefetch", 1, EngineOptions::kMaxPrefetch,
                             "an integer in 1.." + std::to_string(EngineOptions::kMaxPrefetch))) {
      options.prefetch = *value;
    }
  }
  if (const auto node = child(root, "max_batches")) {
    if (auto value = integer(*node, "max_batches", 0, kMaxInteger, "an integer >= 0 (0: no limit)"))
      options.max_batches = *value;
  }
  if (const auto node = child(root, "transforms")) read_transforms(*node);
  if (const auto node = child(root, "sampler")) read_sampler(*node);
  if (const auto node = child(root, "decode")) read_decode(*node);
  if (const auto node = child(root, "collate")) read_collate(*node);
  if (const auto node = child(root, "pool")) read_pool(*node);
  if (const auto node = child(root, "transfer")) read_transfer(*node);
  if (const auto node = child(root, "cache")) read_cache(*node);
  if (const auto node = child(root, "augment")) read_augment(*node);
  if (const auto node = child(root, "stats")) read_stats(*node);
  if (const auto node = child(root, "remote")) read_remote(*node);
}

void ConfigReader::read_sampler(const Node& node) {
  if (!mapping(node, "sampler", "sampler")) return;
  SamplerConfig& sampler = config_.sampler;
  if (const auto value = child(node, "shuffle")) {
    if (auto flag = boolean(*value, "sampler.shuffle")) sampler.shuffle = *flag;
  }
  if (const auto value = child(node, "seed")) {
    if (auto seed = integer(*value, "sampler.seed", 0, std::numeric_limits<uint64_t>::max(), "an integer >= 0"))
      sampler.seed = *seed;
  }
  if (const auto value = child(node, "epochs")) {
    if (auto epochs = integer(*value, "sampler.epochs", 1, kMaxInteger, "an integer >= 1"))
      config_.pipeline.epochs = *epochs;
  }
  if (const auto value = child(node, "drop_last")) {
    if (auto flag = boolean(*value, "sampler.drop_last")) config_.pipeline.drop_last = *flag;
  }
  if (const auto value = child(node, "rank")) {
    if (is_auto(*value)) {
      note("sampler.rank", *value);
    } else if (auto rank = integer(*value, "sampler.rank", 0, 1 << 20, "auto or an integer >= 0")) {
      sampler.rank = *rank;
    }
  }
  if (const auto value = child(node, "world_size")) {
    if (is_auto(*value)) {
      note("sampler.world_size", *value);
    } else if (auto world = integer(*value, "sampler.world_size", 1, 1 << 20, "auto or an integer >= 1")) {
      sampler.world_size = *world;
    }
  }
  if (const auto value = child(node, "remainder")) {
    if (auto text = choice(*value, "sampler.remainder", {"pad", "drop"})) sampler.drop_remainder = *text == "drop";
  }
  if (const auto value = child(node, "shuffle_buffer")) {
    if (auto size =
            integer(*value, "sampler.shuffle_buffer", 0, 1 << 30, "an integer in 0..1073741824 (0: a full shuffle)")) {
      sampler.shuffle_buffer = *size;
    }
  }
}

void ConfigReader::read_decode(const Node& node) {
  if (!mapping(node, "decode", "decode")) return;
  PipelineOptions& options = config_.pipeline;
  if (const auto value = child(node, "threads")) {
    if (is_auto(*value)) {
      note("decode.threads", *value);
      options.decode_threads = 0;
    } else if (auto threads = integer(*value, "decode.threads", 1, EngineOptions::kMaxDecodeThreads,
                                      "auto or an integer in 1.." + std::to_string(EngineOptions::kMaxDecodeThreads))) {
      options.decode_threads = *threads;
    }
  }
  if (const auto value = child(node, "workers")) {
    if (is_auto(*value)) {
      note("decode.workers", *value);
      config_.workers.count = 0;
    } else if (value->IsScalar() && value->Scalar() == "threads") {
      note("decode.workers", *value);
      config_.workers.threads = true;
    } else if (auto workers = integer(*value, "decode.workers", 1, kMaxWorkers,
                                      "auto, threads or an integer in 1.." + std::to_string(kMaxWorkers))) {
      config_.workers.count = *workers;
    }
  }
  if (const auto value = child(node, "timeout")) {
    if (auto text = scalar(*value, "decode.timeout", "a duration such as 60s or 10min, or none")) {
      const auto duration = parse_duration(*text);
      if (*text == "none") {
        config_.workers.timeout = std::chrono::milliseconds(0);
      } else if (!duration || duration->count() < 100) {
        problem("decode.timeout", *value,
                "expected a duration of at least 100ms, such as 60s or 10min, or none, found '" + printable(*text, 80) +
                    "': " + (duration ? std::string("shorter than 100ms") : duration_problem(*text)));
      } else {
        config_.workers.timeout = *duration;
      }
    }
  }
  if (const auto value = child(node, "python")) {
    if (auto text = scalar(*value, "decode.python", "the interpreter of worker processes, e.g. /usr/bin/python3")) {
      if (text->empty()) {
        expected("decode.python", *value, "the interpreter of worker processes, e.g. /usr/bin/python3");
      } else {
        config_.workers.python = *text;
      }
    }
  }
  if (const auto value = child(node, "on_error")) {
    if (auto text = choice(*value, "decode.on_error", {"fail", "skip"})) {
      options.on_error = *text == "skip" ? OnError::kSkip : OnError::kFail;
    }
  }
  if (const auto value = child(node, "decoders")) {
    if (!value->IsMap()) {
      expected("decode.decoders", *value, "a mapping of field name to decoder name, e.g. {image: raw}");
      return;
    }
    note("decode.decoders", *value);
    check_unique_keys(*value, "decode.decoders");
    const std::vector<std::string> registered = DecoderRegistry::global().names();
    for (const auto& entry : *value) {
      const std::string field = entry.first.Scalar();
      const std::string key = "decode.decoders." + field;
      const auto decoder = scalar(entry.second, key, "a decoder name (" + list_text(registered) + ")");
      if (!decoder) continue;
      if (std::find(registered.begin(), registered.end(), *decoder) == registered.end()) {
        problem(key, entry.second,
                "unknown decoder '" + *decoder + "'" + did_you_mean(*decoder, registered) +
                    "; registered: " + list_text(registered));
        continue;
      }
      field_keys_.emplace_back(key, entry.first);
      options.decoders[field] = *decoder;
    }
  }
}

void ConfigReader::read_collate(const Node& node) {
  if (!mapping(node, "collate", "collate")) return;
  CollateOptions& collate = config_.pipeline.collate;
  if (const auto value = child(node, "pad_value")) {
    if (auto pad = number(*value, "collate.pad_value")) collate.pad_value = *pad;
  }
  if (const auto value = child(node, "pad_values")) {
    if (!value->IsMap()) {
      expected("collate.pad_values", *value, "a mapping of field name to pad value, e.g. {tokens: 0}");
    } else {
      note("collate.pad_values", *value);
      check_unique_keys(*value, "collate.pad_values");
      for (const auto& entry : *value) {
        const std::string field = entry.first.Scalar();
        const std::string key = "collate.pad_values." + field;
        if (auto pad = number(entry.second, key)) {
          field_keys_.emplace_back(key, entry.first);
          collate.pad_values[field] = *pad;
        }
      }
    }
  }
  if (const auto value = child(node, "lengths_suffix")) {
    if (auto suffix = scalar(*value, "collate.lengths_suffix", "a non-empty suffix")) {
      if (suffix->empty())
        expected("collate.lengths_suffix", *value, "a non-empty suffix");
      else
        collate.lengths_suffix = *suffix;
    }
  }
  // Field names, one or a list; whether the samples have them is checked with the pipeline's fields.
  const auto names = [&](const char* name, std::vector<std::string>& into) {
    const auto value = child(node, name);
    if (!value) return;
    const std::string key = std::string("collate.") + name;
    const std::string what = "a field name or a list of them, e.g. [image, boxes]";
    note(key, *value);
    const auto add = [&](const Node& item, const std::string& at) {
      const auto text = scalar(item, at, what);
      if (!text) return;
      if (text->empty()) {
        expected(at, item, what);
        return;
      }
      // Once each; a field whose own mapping says `device: host` may be named here too.
      if (std::find(into.begin(), into.end(), *text) == into.end()) into.push_back(*text);
    };
    if (value->IsSequence()) {
      for (size_t i = 0; i < value->size(); ++i) add((*value)[i], key + "[" + std::to_string(i) + "]");
    } else {
      add(*value, key);
    }
  };
  names("lists", collate.lists);
  names("host", collate.host);
}

void ConfigReader::read_pool(const Node& node) {
  if (!mapping(node, "pool", "pool")) return;
  PoolOptions& pool = config_.pipeline.pool;
  if (const auto value = child(node, "slab_size")) {
    if (is_auto(*value)) {
      note("pool.slab_size", *value);
    } else if (auto bytes = size(*value, "pool.slab_size", 1, "auto or a size such as 64MiB, 1.5GB or 4096")) {
      pool.slab_bytes = *bytes;
    }
  }
  if (const auto value = child(node, "slab_count")) {
    if (is_auto(*value)) {
      note("pool.slab_count", *value);
    } else if (auto count = integer(*value, "pool.slab_count", 1, PoolOptions::kMaxSlabCount,
                                    "auto or an integer in 1.." + std::to_string(PoolOptions::kMaxSlabCount))) {
      pool.slab_count = *count;
    }
  }
  if (const auto value = child(node, "budget")) {
    if (value->IsScalar() && value->Scalar() == "unlimited") {
      note("pool.budget", *value);
    } else if (auto bytes = size(*value, "pool.budget", 1, "unlimited or a size such as 2GiB")) {
      pool.budget_bytes = *bytes;
    }
  }
}

void ConfigReader::read_cache(const Node& node) {
  if (!mapping(node, "cache", "cache")) return;
  CacheOptions& cache = config_.pipeline.cache;
  if (const auto value = child(node, "memory")) {
    if (auto text = choice(*value, "cache.memory", {"off", "managed", "device", "host"})) {
      cache.memory = *text == "managed"  ? CacheMemory::kManaged
                     : *text == "device" ? CacheMemory::kDevice
                     : *text == "host"   ? CacheMemory::kHost
                                         : CacheMemory::kOff;
    }
  }
  if (const auto value = child(node, "max_bytes")) {
    if (value->IsScalar() && value->Scalar() == "unlimited") {
      note("cache.max_bytes", *value);
    } else if (auto bytes = size(*value, "cache.max_bytes", 1, "unlimited or a size such as 40GiB")) {
      cache.max_bytes = *bytes;
    }
  }
}

void ConfigReader::read_augment(const Node& node) {
  if (!mapping(node, "augment", "augment")) return;
  AugmentOptions& augment = config_.pipeline.augment;
  augment.field = "image";
  if (const auto value = child(node, "field")) {
    if (auto name = scalar(*value, "augment.field", "a field name")) {
      if (name->empty()) {
        expected("augment.field", *value, "a field name");
      } else {
        augment.field = *name;
      }
    }
  }
  if (const auto crop = child(node, "random_resized_crop")) {
    if (mapping(*crop, "augment.random_resized_crop", "augment.random_resized_crop")) {
      augment.random_resized_crop = true;
      if (const auto size = child(*crop, "size")) {
        const std::string key = "augment.random_resized_crop.size";
        if (!size->IsSequence() || size->size() != 2) {
          expected(key, *size, "[height, width], each 1..65535");
        } else {
          note(key, *size);
          const auto height = integer((*size)[0], key + "[0]", 1, 65535, "an integer in 1..65535");
          const auto width = integer((*size)[1], key + "[1]", 1, 65535, "an integer in 1..65535");
          if (height && width) {
            augment.height = static_cast<int64_t>(*height);
            augment.width = static_cast<int64_t>(*width);
          }
        }
      }
      if (const auto value = child(*crop, "scale")) {
        if (auto range = positive_range(*value, "augment.random_resized_crop.scale", 1.0)) {
          std::tie(augment.scale_min, augment.scale_max) = *range;
        }
      }
      if (const auto value = child(*crop, "ratio")) {
        if (auto range = positive_range(*value, "augment.random_resized_crop.ratio", std::nullopt)) {
          std::tie(augment.ratio_min, augment.ratio_max) = *range;
        }
      }
    }
  }
  if (const auto value = child(node, "flip")) {
    if (auto p = number(*value, "augment.flip")) {
      if (*p >= 0 && *p <= 1) {
        augment.flip = *p;
      } else {
        expected("augment.flip", *value, "a probability in 0..1");
      }
    }
  }
  if (const auto normalize = child(node, "normalize")) {
    if (mapping(*normalize, "augment.normalize", "augment.normalize")) {
      augment.normalize = true;
      if (const auto mean = child(*normalize, "mean")) {
        if (auto means = triple(*mean, "augment.normalize.mean", false)) augment.mean = *means;
      }
      if (const auto deviation = child(*normalize, "std")) {
        if (auto deviations = triple(*deviation, "augment.normalize.std", true)) augment.std = *deviations;
      }
    }
  }
  if (const auto value = child(node, "dtype")) {
    if (auto text = choice(*value, "augment.dtype", {"float32", "float16", "bfloat16"})) {
      augment.dtype = *text == "float16"    ? AugmentOptions::DType::kFloat16
                      : *text == "bfloat16" ? AugmentOptions::DType::kBFloat16
                                            : AugmentOptions::DType::kFloat32;
    }
  }
  if (const auto value = child(node, "layout")) {
    if (auto text = choice(*value, "augment.layout", {"NCHW", "NHWC"})) {
      augment.layout = *text == "NHWC" ? AugmentOptions::Layout::kNHWC : AugmentOptions::Layout::kNCHW;
    }
  }
}

// transfer.devices: `all`, or a list of cpu and cuda:N (each GPU once; cpu may repeat: a host share).
constexpr size_t kMaxDevices = 256;

void ConfigReader::read_devices(const Node& transfer, const Node& value) {
  const std::string what = "all, or a list of devices such as [cuda:0, cuda:1]";
  if (const auto device = child(transfer, "device")) {
    // The one given by an override wins over the file's (a config made for one GPU, run on several);
    // both in the same place is a contradiction.
    const bool device_set = overridden("transfer.device");
    const bool devices_set = overridden("transfer.devices");
    if (device_set && !devices_set) return;
    if (device_set == devices_set) {
      problem("transfer.devices", value,
              "transfer.device is set too: give one device (transfer.device) or several (transfer.devices)");
      return;
    }
  }
  if (value.IsScalar()) {
    if (value.Scalar() == "all") {
      note("transfer.devices", value);
      config_.devices = {"all"};
    } else {
      expected("transfer.devices", value, what);
    }
    return;
  }
  if (!value.IsSequence() || value.size() == 0) {
    expected("transfer.devices", value, what);
    return;
  }
  // A pipeline per entry, each with its threads and slabs: a bound keeps a typo from exhausting memory.
  if (value.size() > kMaxDevices) {
    problem("transfer.devices", value,
            "at most " + std::to_string(kMaxDevices) + " devices, found a list of " + std::to_string(value.size()));
    return;
  }
  note("transfer.devices", value);
  std::vector<std::string> devices;
  std::string listed;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string key = "transfer.devices[" + std::to_string(i) + "]";
    const auto device = scalar(value[i], key, "cpu or cuda:N");
    if (!device) continue;
    const bool numbered = device->rfind("cuda:", 0) == 0 && device->size() > 5 && device->size() <= 9 &&
                          device->find_first_not_of("0123456789", 5) == std::string::npos;
    if (*device != "cpu" && !numbered) {
      expected(key, value[i], "cpu or cuda:N (a GPU by its number: in a list, cuda alone is ambiguous)");
    } else if (numbered && std::find(devices.begin(), devices.end(), canonical(*device)) != devices.end()) {
      problem(key, value[i], *device + " is listed twice: each GPU gets one share of every step");
    } else {
      devices.push_back(canonical(*device));
    }
    listed += (listed.empty() ? "" : ", ") + *device;
  }
  config_.values["transfer.devices"] = "[" + listed + "]";
  config_.devices = std::move(devices);
}

void ConfigReader::read_transfer(const Node& node) {
  if (!mapping(node, "transfer", "transfer")) return;
  PipelineOptions& options = config_.pipeline;
  TransferOptions& transfer = options.transfer;
  if (const auto value = child(node, "device")) {
    const std::string what = "auto, cpu, cuda or cuda:N";
    if (auto device = scalar(*value, "transfer.device", what)) {
      const bool numbered = device->rfind("cuda:", 0) == 0 && device->size() > 5 && device->size() <= 9 &&
                            device->find_first_not_of("0123456789", 5) == std::string::npos;
      if (*device == "auto" || *device == "cpu" || *device == "cuda" || numbered) {
        options.device = *device;
      } else {
        problem("transfer.device", *value,
                "expected " + what + ", found '" + *device + "'" + did_you_mean(*device, {"auto", "cpu", "cuda"}));
      }
    }
  }
  if (const auto value = child(node, "devices")) read_devices(node, *value);
  if (const auto value = child(node, "stream_priority")) {
    if (auto text = choice(*value, "transfer.stream_priority", {"normal", "high"}))
      transfer.high_priority_stream = *text == "high";
  }
  if (const auto value = child(node, "wait")) {
    if (auto text = choice(*value, "transfer.wait", {"poll", "spin"}))
      transfer.wait = *text == "spin" ? WaitMode::kSpin : WaitMode::kPoll;
  }
  if (const auto value = child(node, "max_chunk")) {
    if (auto bytes =
            size(*value, "transfer.max_chunk", TransferOptions::kMinChunkBytes,
                 "a size of at least " + format_byte_size(TransferOptions::kMinChunkBytes) + ", such as 32MiB"))
      transfer.max_chunk_bytes = *bytes;
  }
  if (const auto value = child(node, "alignment")) {
    const std::string what = "a power of two up to " + std::to_string(TransferOptions::kMaxAlignment) + ", such as 16";
    auto bytes = size(*value, "transfer.alignment", 1, what);
    if (bytes && (*bytes > TransferOptions::kMaxAlignment || (*bytes & (*bytes - 1)) != 0)) {
      expected("transfer.alignment", *value, what);
    } else if (bytes) {
      transfer.min_alignment = *bytes;
    }
  }
  if (const auto value = child(node, "parallel_pack")) {
    if (auto bytes = size(*value, "transfer.parallel_pack", 0, "a size such as 1MiB"))
      transfer.parallel_pack_bytes = *bytes;
  }
  if (const auto value = child(node, "direct_copy")) {
    if (auto bytes = size(*value, "transfer.direct_copy", 0, "a size such as 1MiB (0: never)"))
      transfer.direct_copy_bytes = *bytes;
  }
}

void ConfigReader::read_stats(const Node& node) {
  if (!mapping(node, "stats", "stats")) return;
  StatsConfig& stats = config_.stats;
  if (const auto value = child(node, "progress")) {
    if (auto text = choice(*value, "stats.progress", {"auto", "live", "plain", "off"})) {
      using Progress = StatsConfig::Progress;
      stats.progress = *text == "live"    ? Progress::kLive
                       : *text == "plain" ? Progress::kPlain
                       : *text == "off"   ? Progress::kOff
                                          : Progress::kAuto;
    }
  }
  if (const auto value = child(node, "interval")) {
    if (auto text = scalar(*value, "stats.interval", "a duration such as 5s or 500ms")) {
      const auto duration = parse_duration(*text);
      if (!duration || duration->count() < 100) {
        problem("stats.interval", *value,
                "expected a duration of at least 100ms, such as 5s or 500ms, found '" + printable(*text, 80) +
                    "': " + (duration ? std::string("shorter than 100ms") : duration_problem(*text)));
      } else {
        stats.interval = *duration;
      }
    }
  }
  if (const auto value = child(node, "report")) {
    if (auto path = output_path(*value, "stats.report")) stats.report_path = *path;
  }
  if (const auto value = child(node, "trace")) {
    if (auto path = output_path(*value, "stats.trace")) config_.pipeline.trace = *path;
  }
}

std::optional<std::string> ConfigReader::output_path(const Node& node, const std::string& key) {
  if (node.IsNull()) {
    note(key, node);
    return std::nullopt;
  }
  auto path = scalar(node, key, "a file path");
  if (!path) return std::nullopt;
  // Found now rather than after a long run: the file's folder must exist.
  const size_t slash = path->rfind('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path->substr(0, slash);
  struct stat info {};
  if (::stat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    problem(key, node, "the folder '" + folder + "' does not exist");
  } else if (::access(folder.c_str(), W_OK) != 0) {
    problem(key, node, "the folder '" + folder + "' is not writable");
  } else if (::stat(path->c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    problem(key, node, "'" + *path + "' is a folder; expected a file path");
  } else {
    return path;
  }
  return std::nullopt;
}

std::optional<std::chrono::milliseconds> ConfigReader::duration(const Node& node, const std::string& key,
                                                                int64_t min_ms) {
  const auto text = scalar(node, key, "a duration such as 30s or 500ms");
  if (!text) return std::nullopt;
  const auto parsed = parse_duration(*text);
  if (!parsed || parsed->count() < min_ms) {
    problem(key, node,
            "expected a duration of at least " + std::to_string(min_ms) + "ms, such as 30s or 500ms, found '" +
                printable(*text, 80) +
                "': " + (parsed ? "shorter than " + std::to_string(min_ms) + "ms" : duration_problem(*text)));
    return std::nullopt;
  }
  return parsed;
}

void ConfigReader::read_remote(const Node& node) {
  if (!mapping(node, "remote", "remote")) return;
  RemoteOptions& remote = config_.remote;
  const auto text = [&](const char* name, std::string& into, const char* what) {
    if (const auto value = child(node, name)) {
      if (auto found = scalar(*value, std::string("remote.") + name, what)) into = *found;
    }
  };
  text("cache_dir", remote.cache_dir, "a folder path");
  text("ca_bundle", remote.ca_bundle, "a PEM file path");
  text("endpoint_url", remote.endpoint_url, "an http:// or https:// URL");
  text("region", remote.region, "an AWS region such as us-east-1");
  text("profile", remote.profile, "a profile name");
  if (!remote.endpoint_url.empty() && !remote.endpoint_url.starts_with("http://") &&
      !remote.endpoint_url.starts_with("https://")) {
    problem("remote.endpoint_url", *child(node, "endpoint_url"),
            "expected an http:// or https:// URL, found '" + printable(remote.endpoint_url, 80) + "'");
  }
  if (!remote.ca_bundle.empty() && ::access(remote.ca_bundle.c_str(), R_OK) != 0) {
    problem("remote.ca_bundle", *child(node, "ca_bundle"), "cannot read '" + remote.ca_bundle + "'");
  }
  if (const auto value = child(node, "max_bytes")) {
    if (value->IsScalar() && value->Scalar() == "auto") {
      note("remote.max_bytes", *value);
    } else if (auto bytes = size(*value, "remote.max_bytes", 1, "auto or a size such as 200GiB")) {
      remote.max_bytes = *bytes;
    }
  }
  if (const auto value = child(node, "block_size")) {
    if (auto bytes = size(*value, "remote.block_size", 4096, "a size of at least 4KiB, such as 64MiB"))
      remote.block_bytes = *bytes;
  }
  if (const auto value = child(node, "prefetch")) {
    if (auto count = integer(*value, "remote.prefetch", 0, 4096, "an integer in 0..4096")) remote.prefetch = *count;
  }
  if (const auto value = child(node, "connections")) {
    if (auto count = integer(*value, "remote.connections", 1, 256, "an integer in 1..256")) remote.connections = *count;
  }
  if (const auto value = child(node, "retries")) {
    if (auto count = integer(*value, "remote.retries", 0, 100, "an integer in 0..100"))
      remote.retries = static_cast<int>(*count);
  }
  if (const auto value = child(node, "backoff")) {
    if (auto wait = duration(*value, "remote.backoff", 1)) remote.backoff = *wait;
  }
  if (const auto value = child(node, "timeout")) {
    if (auto wait = duration(*value, "remote.timeout", 1000)) remote.timeout = *wait;
  }
  if (const auto value = child(node, "connect_timeout")) {
    if (auto wait = duration(*value, "remote.connect_timeout", 100)) remote.connect_timeout = *wait;
  }
  if (const auto value = child(node, "anonymous")) {
    if (auto flag = boolean(*value, "remote.anonymous")) remote.anonymous = *flag;
  }
}

}  // namespace ferry::detail
