#include "ferry/assembly/config_schema.h"

#include <algorithm>
#include <sstream>

#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/formats/source_registry.h"
#include "ferry/io/transforms/transform_registry.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/stages/pipeline_options.h"

namespace ferry {

const std::vector<ConfigKey>& config_keys() {
  static const std::string dtype_choice = "one of: " + dtype_names_text();  // the keys view it
  static const std::vector<ConfigKey> keys{
      // source
      {"source", "mapping", "required", "Where the samples come from; `kind` selects the reader.",
       "{kind: synthetic, fields: [{name: x, dtype: float32, shape: [4]}]}"},
      {"source.kind", "source kind name", "required",
       "The reader: `synthetic` makes deterministic samples from (seed, index), nothing to download; `megatron` reads "
       "a Megatron-LM indexed token dataset (`.bin` + `.idx`); `tokens` a flat file of tokens (nanoGPT's `train.bin`); "
       "`mix` mixes sources by weight; `tar` reads WebDataset-style tar shards; `image_folder` "
       "reads a folder of image files, one sub-folder per class (torchvision's ImageFolder layout); `python` runs a "
       "map-style dataset of yours in worker processes (docs/python-data.md); or a kind your program or a plugin "
       "registers. Each kind takes its own keys beside `kind` (Source kinds, below).",
       "synthetic"},
      {"plugins", "path or list of paths", "none",
       "Plugins to load before the rest of the config is read: shared libraries that add source kinds, decoders and "
       "transforms (docs/extending.md). A relative path is relative to the current folder.",
       "[build/libmy_plugin.so]"},
      {"transforms", "list of transforms", "none",
       "Sample transforms, run in this order on the decode threads after the decoders: each maps a sample's fields "
       "to new fields (Transforms, below).",
       "[{kind: drop, fields: [label]}]"},
      {"transforms[].kind", "transform name", "required",
       "The transform: drop, rename, boxes, python, or one your program or a plugin registers. It takes its own keys "
       "beside `kind`.",
       "drop"},
      // batches
      {"batch_size", "integer 1.." + std::to_string(EngineOptions::kMaxBatchSize), "32", "Samples per batch.", "64"},
      {"prefetch", "integer 1.." + std::to_string(EngineOptions::kMaxPrefetch), "3",
       "Batches in flight between planning and the consumer: more hides jitter, each costs a pinned slab.", "4"},
      {"max_batches", "integer >= 0", "0 (every epoch)",
       "Stop after this many batches in all, counted from the run's start (a resumed run continues the count).", "100"},
      // sampler
      {"sampler", "mapping", "sequential, one rank", "The order of the samples and this process's share of them.",
       "{shuffle: true, seed: 1}"},
      {"sampler.shuffle", "boolean", "false",
       "Visit a different permutation of the samples every epoch, derived from (seed, epoch).", "true"},
      {"sampler.seed", "integer", "0",
       "Seed of the shuffle, and of random crops and flips (`crop: random`, `random_resized`, `flip`).", "1234"},
      {"sampler.epochs", "integer >= 1", "1", "Passes over the data.", "3"},
      {"sampler.drop_last", "boolean", "false", "Drop the last batch of an epoch when it is smaller than batch_size.",
       "true"},
      {"sampler.rank", "auto or integer 0..1048575", "auto",
       "This process's data-parallel rank. auto: $RANK when torchrun set it, else 0.", "0"},
      {"sampler.world_size", "auto or integer 1..1048576", "auto",
       "Number of data-parallel ranks. auto: $WORLD_SIZE when torchrun set it, else 1. Setting it to another number "
       "than torchrun's needs sampler.rank too.",
       "8"},
      {"sampler.shuffle_buffer", "integer 0..1073741824", "0 (a full shuffle)",
       "Tar shards only, with shuffle: every epoch the shards come in a new order and their samples, read shard after "
       "shard, pass through a buffer of this many samples that emits one at random (as WebDataset shuffles): reads "
       "stay sequential. The order is computed per epoch from (seed, epoch), 4 bytes a sample, so it resumes exactly. "
       "0: a full permutation of all samples (random reads). (tar)",
       "1000"},
      {"sampler.remainder", "one of: pad, drop", "pad",
       "When an epoch does not divide evenly among the ranks: pad (repeat its first samples) or drop the rest, so "
       "every rank gets the same number of batches.",
       "drop"},
      // decode
      {"decode", "mapping", "", "Turning stored samples into tensors.", "{threads: 8}"},
      {"decode.threads", "auto or integer 1.." + std::to_string(EngineOptions::kMaxDecodeThreads), "auto",
       "Samples decoded at once. auto: the hardware threads minus two (at least 1), divided among the job's processes "
       "on this machine under torchrun (LOCAL_WORLD_SIZE).",
       "8"},
      {"decode.on_error", "one of: fail, skip", "fail",
       "A sample that cannot be read or decoded: fail the run (naming the sample), or skip it: fill its batch from the "
       "next samples, log it on stderr, count it and list it in the report.",
       "skip"},
      {"decode.workers", "auto, threads or integer 1..256", "auto (decode.threads)",
       "Worker processes that run Python code (source kind python, python transforms), each a new interpreter "
       "writing samples into shared memory. decode.threads is raised to match when it is auto. threads: on the "
       "decode threads of this process instead, each call holding the GIL (for code that releases it: PIL, numpy, "
       "OpenCV); from ferry's Python package only.",
       "8"},
      {"decode.timeout", "duration or none", "5min",
       "How long a worker may take for one sample, or to start: past it the worker is stopped and the sample fails "
       "(naming it), or is skipped under on_error: skip.",
       "60s"},
      {"decode.python", "path", "python3 (from Python: its own interpreter)",
       "The interpreter worker processes run; it needs numpy and ferry's package (the FERRY_PYTHON environment "
       "variable sets the default).",
       "/usr/bin/python3"},
      {"decode.decoders", "mapping of field to decoder", "the source's",
       "Decoder per field, replacing the source's choice (built in: raw, jpeg, png, webp, image, npy, label, json; and "
       "any "
       "your program or a plugin registers). It decodes with the keys the source gives the field.",
       "{image: raw}"},
      {"decode.decoders.<field>", "decoder name", "the source's", "The decoder of one field.", "raw"},
      // collate
      {"collate", "mapping", "", "Stacking samples into a batch.", "{pad_value: 0}"},
      {"collate.pad_value", "number", "0", "Pad value of variable-length fields (converted to the field's dtype).",
       "-1"},
      {"collate.pad_values", "mapping of field to number", "pad_value", "Pad value per field.", "{tokens: 0}"},
      {"collate.pad_values.<field>", "number", "pad_value", "The pad value of one variable-length field.", "-100"},
      {"collate.lengths_suffix", "string", "_lengths",
       "A variable-length field `x` comes with `x` + suffix: the lengths, an int64 [batch] tensor.", "_len"},
      {"collate.lists", "field name or list of field names", "none",
       "Fields delivered as a list of tensors, each sample's at its own shape (images of their own size, a "
       "sample's boxes), views of the batch's one buffer, copied with the rest. A field whose shape varies in more "
       "than its first size (`[null, null, 3]`) must be one.",
       "[image, boxes]"},
      {"collate.host", "field name or list of field names", "none",
       "Fields that stay on the host (ids, names as bytes): collated into CPU tensors of their own, not copied to "
       "the device.",
       "[id]"},
      // pool
      {"pool", "mapping", "", "The pinned host buffers (slabs) batches are staged in; all allocated at start-up.",
       "{slab_count: 4}"},
      {"pool.slab_size", "auto or size", "auto",
       "Bytes per slab; a batch must fit in one. auto: the largest batch the source can make.", "64MiB"},
      {"pool.slab_count", "auto or integer >= prefetch", "auto (prefetch)",
       "Number of slabs; each batch in flight holds one.", "6"},
      {"pool.budget", "unlimited or size", "unlimited",
       "Cap on pinned bytes; must hold the slabs (`slab_count`, else `prefetch`), each rounded up to a 4 KiB page.",
       "2GiB"},
      // transfer
      {"transfer", "mapping", "", "Copying batches to the device.", "{device: cuda}"},
      {"transfer.device", "auto, cpu, cuda or cuda:N", "auto",
       "Where batches are delivered. auto: cuda:0 (cuda:$LOCAL_RANK under torchrun) when this build and machine have a "
       "GPU, else cpu. cuda means cuda:$LOCAL_RANK under torchrun.",
       "cuda:0"},
      {"transfer.devices", "all, or a list of cpu and cuda:N", "none: one device, transfer.device",
       "One process feeding several devices: a pipeline per device (its own pinned pool, copy stream and ready "
       "queue), decoding on one shared pool of `decode.threads`. Each step takes the next len(devices) x batch_size "
       "samples and gives every device its batch_size share (every N-th sample, as N data-parallel ranks would get "
       "them); iteration yields one batch per device (C++ BatchGroup, Python a list of batches). all: every visible "
       "GPU. cpu may be listed more than once (a host share, e.g. to try a config on a machine without GPUs). Not "
       "with transfer.device.",
       "[cuda:0, cuda:1]"},
      {"transfer.stream_priority", "one of: normal, high", "normal",
       "Priority of ferry's copy stream; high lets its copies start ahead of other streams' queued work.", "high"},
      {"transfer.wait", "one of: poll, spin", "poll",
       "How the completion thread waits for a copy: poll (yield ~100 us, then sleep in short steps) or spin (lowest "
       "latency, one busy core).",
       "spin"},
      {"transfer.max_chunk", "size >= 4KiB", "32MiB", "Largest single cudaMemcpyAsync of a packed batch.", "16MiB"},
      {"transfer.alignment", "power of two <= " + std::to_string(TransferOptions::kMaxAlignment), "16",
       "Every packed field starts at a multiple of this (and of its element size).", "64"},
      {"transfer.parallel_pack", "size", "1MiB", "Batches of at least this size are packed by several threads.",
       "4MiB"},
      {"transfer.direct_copy", "size (0: never)", "1MiB",
       "A decoded tensor of at least this size already in pinned memory is copied to the device from where it is.",
       "0"},
      // cache
      {"cache", "mapping", "",
       "The dataset cache: samples decoded once are kept, and later epochs gather their batches from there (no read, "
       "decode, pack or copy from the host). Every field must decode the same way each epoch: no random crop or flip.",
       "{memory: managed}"},
      {"cache.memory", "one of: off, managed, device, host", "off",
       "Where the cache lives. managed: CUDA managed memory on the delivery GPU, which `cache_to()` can move to the "
       "host and back; device: plain GPU memory; host: host memory, for `transfer.device: cpu`.",
       "managed"},
      {"cache.max_bytes", "unlimited or size", "unlimited",
       "Cap on the cache's size. With fixed-size fields a cache that needs more is refused; with variable-length "
       "ones (required when one has no max_length) the samples that do not fit stay uncached.",
       "40GiB"},
      // augment
      {"augment", "mapping", "",
       "Training-ready images, made on the batch's device once its bytes are there (one kernel per batch; CPU "
       "pipelines do the same on the host): a random-resized crop, a random horizontal flip, values scaled to [0, 1], "
       "normalized, in `dtype` and `layout`. Every random choice comes from `sampler.seed`, the epoch and the sample, "
       "so runs and resumes repeat exactly.",
       "{field: image, random_resized_crop: {size: [224, 224]}, flip: 0.5}"},
      {"augment.field", "field name", "image",
       "The image field to augment: uint8 [H, W, 3] of a fixed size (decoders jpeg, png, webp, image). It is delivered "
       "as "
       "the augmented tensor.",
       "image"},
      {"augment.random_resized_crop", "mapping", "none (the whole image, not resized)",
       "A window of each image, of a random share of its area and a random aspect ratio, resized (bilinear) to `size`, "
       "as torchvision's RandomResizedCrop defines it, including its fallback to a central window after 10 tries.",
       "{size: [224, 224], scale: [0.08, 1.0]}"},
      {"augment.random_resized_crop.size", "[height, width], each 1..65535", "the image's [H, W]",
       "The output's height and width.", "[224, 224]"},
      {"augment.random_resized_crop.scale", "[min, max], 0 < min <= max <= 1", "[0.08, 1.0]",
       "The range of the window's share of the image's area, drawn uniformly.", "[0.25, 1.0]"},
      {"augment.random_resized_crop.ratio", "[min, max], 0 < min <= max", "[0.75, 1.3333]",
       "The range of the window's aspect ratio (width / height), drawn uniformly on a log scale.", "[0.5, 2.0]"},
      {"augment.flip", "number in 0..1", "0", "The probability that a sample is flipped horizontally.", "0.5"},
      {"augment.normalize", "mapping", "none (values / 255)", "Per channel (R, G, B): (value / 255 - mean) / std.",
       "{mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}"},
      {"augment.normalize.mean", "list of 3 numbers", "[0, 0, 0]", "The mean of each channel, in [0, 1] units.",
       "[0.485, 0.456, 0.406]"},
      {"augment.normalize.std", "list of 3 numbers > 0", "[1, 1, 1]",
       "The standard deviation of each channel, in [0, 1] units.", "[0.229, 0.224, 0.225]"},
      {"augment.dtype", "one of: float32, float16, bfloat16", "float32", "The output's element type.", "bfloat16"},
      {"augment.layout", "one of: NCHW, NHWC", "NCHW", "The output's layout: [B, 3, H, W] or [B, H, W, 3].", "NHWC"},
      // stats
      {"stats", "mapping", "", "Progress, the report of `ferry run` and the trace.", "{progress: plain}"},
      {"stats.progress", "one of: auto, live, plain, off", "auto",
       "Progress on stderr: live (one line rewritten in place), plain (a line every `interval`, for logs), off. auto: "
       "live on a terminal, plain otherwise.",
       "plain"},
      {"stats.interval", "duration", "5s", "Time between plain progress lines.", "10s"},
      {"stats.report", "path or empty", "none",
       "Write the JSON report (docs/report.md) to this file at the end of `ferry run`.", "run-report.json"},
      {"stats.trace", "path or empty", "none",
       "Write the run as a Chrome trace-event file (opens in Perfetto, ui.perfetto.dev, and chrome://tracing): every "
       "stage's work on every batch on the thread that did it, the consumer's waits, queue depths and pinned slabs "
       "in use, skipped samples (docs/report.md, The trace). Pipelines of one process naming the same file share "
       "it, one track each; each rank of several writes its own (trace.rank3.json).",
       "trace.json"},
      // remote
      {"remote", "mapping", "",
       "How shards given as http://, https://, s3:// URLs or `pipe:` commands, and compressed shards, are fetched and "
       "kept (docs/remote-data.md).",
       "{cache_dir: /scratch/ferry-cache, max_bytes: 200GiB}"},
      {"remote.cache_dir", "folder path", "$XDG_CACHE_HOME/ferry (~/.cache/ferry)",
       "Where fetched and decoded shards are kept. The ranks of one machine that name the same folder share it: each "
       "shard is fetched once.",
       "/scratch/ferry-cache"},
      {"remote.max_bytes", "size or auto", "auto (half the free space of its disk)",
       "The most the cache holds. Shards are dropped by when they are next needed (the furthest first); it must hold "
       "one shard per decode thread.",
       "200GiB"},
      {"remote.prefetch", "integer in 0..4096", "8",
       "Shards (or blocks) fetched ahead of the reading, in the order the run will read them.", "32"},
      {"remote.connections", "integer in 1..256", "8", "Transfers at once; half of them fetch ahead.", "16"},
      {"remote.block_size", "size >= 4KiB", "64MiB",
       "A large remote file read at random (a Megatron .bin) is fetched and cached in blocks of this size.", "16MiB"},
      {"remote.retries", "integer in 0..100", "5",
       "Attempts after the first for a transfer that fails on the way (5xx, 429, a reset, a cut body, a stall), with "
       "a backoff that doubles; a retry asks only for the bytes still missing.",
       "10"},
      {"remote.backoff", "duration", "200ms", "The first wait before a retry; it doubles each time, to at most 8 s.",
       "1s"},
      {"remote.timeout", "duration >= 1s", "30s",
       "A transfer (or a `pipe:` command) that brings nothing for this long is given up and retried.", "60s"},
      {"remote.connect_timeout", "duration", "10s", "The longest wait for a connection.", "3s"},
      {"remote.ca_bundle", "PEM file path", "the system's",
       "The certificate authorities HTTPS servers are checked against (a store with its own authority).",
       "/etc/ssl/certs/ca-certificates.crt"},
      {"remote.endpoint_url", "http(s) URL", "AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's, AWS",
       "The address of an S3-compatible store; s3://BUCKET/KEY is then read as ENDPOINT/BUCKET/KEY.",
       "http://127.0.0.1:9000"},
      {"remote.region", "text", "AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1",
       "The region S3 requests are signed for.", "eu-west-1"},
      {"remote.profile", "text", "AWS_PROFILE, default",
       "The profile of the shared AWS credentials and config files (~/.aws/credentials, ~/.aws/config).", "training"},
      {"remote.anonymous", "boolean", "false",
       "Send S3 requests unsigned (public buckets), whatever credentials there are.", "true"},
  };
  return keys;
}

const ConfigKey* find_config_key(std::string_view path) {
  const auto& keys = config_keys();
  const auto found = std::find_if(keys.begin(), keys.end(), [&](const ConfigKey& key) { return key.path == path; });
  return found == keys.end() ? nullptr : &*found;
}

std::vector<std::string> config_section_keys(std::string_view section) {
  std::vector<std::string> names;
  for (const ConfigKey& key : config_keys()) {
    std::string_view rest = key.path;
    if (!section.empty()) {
      if (rest.size() <= section.size() + 1 || rest.substr(0, section.size()) != section || rest[section.size()] != '.')
        continue;
      rest.remove_prefix(section.size() + 1);
    }
    if (rest.find('.') != std::string_view::npos) continue;
    names.emplace_back(rest);
  }
  return names;
}

namespace {

// A table cell: no line breaks or '|', which would end the cell.
std::string cell(std::string text) {
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  std::string escaped;
  for (const char c : text) escaped += c == '|' ? std::string("\\|") : std::string(1, c);
  return escaped;
}

// One row per key, nested keys under their parent's path ("members[].name", "image.shape").
void key_rows(std::ostringstream& out, const std::vector<KeySpec>& keys, const std::string& prefix) {
  for (const KeySpec& key : keys) {
    const std::string path = prefix + key.name;
    out << "| `" << path << "` | " << cell(key.type_description()) << " | "
        << cell(key.default_value.empty() ? "none" : key.default_value) << " | " << cell(key.description) << " | "
        << (key.example.empty() ? std::string() : "`" + cell(key.example) + "`") << " |\n";
    if (key.type == KeySpec::Type::kMapping) key_rows(out, key.keys, path + ".");
    if (key.type == KeySpec::Type::kList && key.item.front().type == KeySpec::Type::kMapping) {
      key_rows(out, key.item.front().keys, path + "[].");
    }
  }
}

void table(std::ostringstream& out, const std::string& heading, const std::string& description,
           const std::string& origin, const std::vector<KeySpec>& keys, const std::string& prefix) {
  out << "### " << heading << "\n\n";
  if (!description.empty()) out << description << "\n\n";
  if (!origin.empty()) out << "From " << origin << ".\n\n";
  if (keys.empty()) {
    out << "No keys of its own.\n\n";
    return;
  }
  out << "| key | type | default | description | example |\n|---|---|---|---|---|\n";
  key_rows(out, keys, prefix);
  out << "\n";
}

}  // namespace

std::string extension_keys_markdown() {
  std::ostringstream out;
  out << "## Source kinds\n\n"
         "`source.kind` picks one; its keys sit beside `kind` in `source:`.\n\n";
  for (const auto& kind : SourceRegistry::global().kinds()) {
    table(out, "`" + kind->name + "`", kind->description, kind->origin, kind->keys, "source.");
  }
  out << "## Decoders\n\n"
         "A field's mapping that names a decoder (`decoder:` of a tar member, of an image folder's `image`) also takes "
         "the decoder's keys.\n\n";
  for (const auto& kind : DecoderRegistry::global().kinds()) {
    table(out, "`" + kind->name + "`", kind->description, kind->origin, kind->keys, "");
  }
  out << "## Transforms\n\n"
         "Each entry of `transforms:` names one with `kind`; its keys sit beside it.\n\n";
  for (const auto& kind : TransformRegistry::global().kinds()) {
    table(out, "`" + kind->name + "`", kind->description, kind->origin, kind->keys, "");
  }
  return out.str();
}

}  // namespace ferry
