// The dataset cache (Note [dataset cache]): cached epochs are byte-identical to uncached ones — same
// batches, same samples, same order — for every cacheable dataset kind (synthetic fixed and
// variable-length fields, Megatron tokens, npy, labels, raw bytes, JPEG with a center crop), shuffled,
// sharded over ranks, at several thread counts, and resumed in a new pipeline mid-epoch. Here with the
// host cache (CPU delivery); on a GPU machine also with device and managed memory, and cache_to().
// Plus what validation refuses: random crops, sizes, memory that does not suit the device.
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/assembly/config_error.h>
#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/assembly/pipeline_state_loader.h>
#include <ferry/build_config.h>
#include <ferry/io/decoders/jpeg_decoder.h>
#include <ferry/io/formats/synthetic_source.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/segment_copy.h>
#include <ferry/pipeline/unified_memory.h>
#include <ferry/stages/standard_pipeline.h>
#include "tests/support/error_text.h"
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

struct Taken {
  uint64_t epoch = 0;
  uint64_t index = 0;
  std::vector<uint64_t> samples;
  std::vector<std::pair<std::string, at::Tensor>> fields;  // on the CPU
};

std::vector<Taken> take(Pipeline& pipeline, size_t limit = 0) {
  std::vector<Taken> got;
  while (limit == 0 || got.size() < limit) {
    const std::optional<Batch> batch = pipeline.next();
    if (!batch) break;
    Taken taken{batch->epoch(), batch->index(), batch->sample_indices(), {}};
    for (size_t f = 0; f < batch->size(); ++f) {
      taken.fields.emplace_back(batch->names()[f], batch->tensors()[f].to(at::kCPU).clone());
    }
    got.push_back(std::move(taken));
  }
  return got;
}

// Every batch the same: position, samples, names, dtypes, shapes and bytes.
void expect_same(const std::vector<Taken>& expected, const std::vector<Taken>& got, const std::string& what) {
  ASSERT_EQ(expected.size(), got.size()) << what;
  for (size_t b = 0; b < expected.size(); ++b) {
    const Taken& e = expected[b];
    const Taken& g = got[b];
    ASSERT_EQ(e.epoch, g.epoch) << what << " batch " << b;
    ASSERT_EQ(e.index, g.index) << what << " batch " << b;
    ASSERT_EQ(e.samples, g.samples) << what << " batch " << b;
    ASSERT_EQ(e.fields.size(), g.fields.size()) << what << " batch " << b;
    for (size_t f = 0; f < e.fields.size(); ++f) {
      ASSERT_EQ(e.fields[f].first, g.fields[f].first) << what;
      const at::Tensor& x = e.fields[f].second;
      const at::Tensor& y = g.fields[f].second;
      ASSERT_EQ(x.scalar_type(), y.scalar_type()) << what << " " << e.fields[f].first;
      ASSERT_EQ(x.sizes(), y.sizes()) << what << " batch " << b << " field " << e.fields[f].first;
      ASSERT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0)
          << what << ": batch " << b << " (epoch " << e.epoch << ", index " << e.index << ") field "
          << e.fields[f].first << " differs";
    }
  }
}

// Where the cache can live on this machine: host memory always (CPU delivery); device and managed
// memory where there is a GPU (managed where unified memory works).
std::vector<std::pair<std::string, std::string>> memories() {
  std::vector<std::pair<std::string, std::string>> kinds = {{"host", "cpu"}};
  if (gpu_build() && cuda_device_count() > 0 && std::string(segment_kernel_reason()).empty()) {
    kinds.emplace_back("device", "cuda:0");
    if (unified_memory_support(0).supported) kinds.emplace_back("managed", "cuda:0");
  }
  return kinds;
}

class DatasetCache : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new testing::TempDir("ferry_cache_test");
    const std::string cli = FERRY_CLI;
    const std::string quiet = " > /dev/null";
    ASSERT_EQ(
        std::system((cli + " make-dataset tokens " + *data_ / "tokens" + " --documents 40 --seed 3" + quiet).c_str()),
        0);
    ASSERT_EQ(std::system((cli + " make-dataset npy " + *data_ / "npy" + " --samples 150 --shards 3" + quiet).c_str()),
              0);
    ASSERT_EQ(std::system(
                  (cli + " make-dataset tar " + *data_ / "jpg" + " --samples 90 --shards 2 --image-size 40x56" + quiet)
                      .c_str()),
              0);
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }

  // Each dataset kind, as a config (without transfer and cache).
  static std::map<std::string, std::string> datasets() {
    return {
        {"synthetic", R"(
source:
  kind: synthetic
  samples: 230
  seed: 5
  fields:
    - {name: x, dtype: float32, shape: [3]}
    - {name: tokens, dtype: int32, length: [1, 9]}
    - {name: h, dtype: float16, shape: [2, 5]}
collate: {pad_values: {tokens: -7}}
batch_size: 16
)"},
        {"megatron", "source: {kind: megatron, prefix: " + *data_ / "tokens" + R"(, seq_len: 31, add_extra_token: true}
batch_size: 8
)"},
        {"npy", "source:\n  kind: tar\n  shards: " + *data_ / "npy/shard-{000000..000002}.tar" + R"(
  members:
    - {name: x, extension: npy, decoder: npy, dtype: float32, shape: [64]}
    - {name: label, extension: cls, decoder: label, dtype: int64, shape: []}
batch_size: 12
)"},
        {"jpeg-center-and-raw", "source:\n  kind: tar\n  shards: " + *data_ / "jpg/shard-{000000..000001}.tar" + R"(
  members:
    - {name: image, extension: jpg, decoder: jpeg, shape: [24, 24, 3], resize_shorter: 32, crop: center}
    - {name: label, extension: cls, decoder: label, dtype: int64, shape: []}
    - {name: bytes, extension: jpg, decoder: raw}
batch_size: 10
pool: {slab_size: 1MiB}
cache: {max_bytes: 4MiB}
)"},
    };
  }

  static Config config(const std::string& yaml, const std::string& memory, const std::string& device,
                       std::vector<std::string> overrides = {}) {
    overrides.push_back("transfer.device=" + device);
    overrides.push_back("cache.memory=" + memory);
    overrides.push_back("sampler.epochs=3");
    overrides.push_back("sampler.shuffle=true");
    overrides.push_back("sampler.seed=17");
    return parse_config(yaml, "cache.yaml", overrides);
  }

  static testing::TempDir* data_;
};

testing::TempDir* DatasetCache::data_ = nullptr;

TEST_F(DatasetCache, CachedEpochsAreByteIdenticalForEveryDatasetKindShuffledAndSharded) {
  for (const auto& [memory, device] : memories()) {
    for (const auto& [kind, yaml] : datasets()) {
      for (const bool sharded : {false, true}) {
        const std::string what = kind + ", " + memory + " memory" + (sharded ? ", rank 1 of 3" : "");
        SCOPED_TRACE(what);
        std::vector<std::string> world;
        if (sharded) world = {"sampler.rank=1", "sampler.world_size=3"};
        Pipeline plain = make_pipeline(config(yaml, "off", device, world));
        const std::vector<Taken> expected = take(plain);
        ASSERT_GT(expected.size(), 3u);

        for (const size_t threads : {size_t{1}, size_t{4}}) {
          Config cached_config = config(yaml, memory, device, world);
          cached_config.pipeline.decode_threads = threads;
          cached_config.pipeline.prefetch = threads == 1 ? 1 : 6;
          Pipeline cached = make_pipeline(cached_config);
          expect_same(expected, take(cached), what + ", " + std::to_string(threads) + " threads");
          const PipelineStats stats = cached.stats();
          ASSERT_TRUE(stats.cache.enabled);
          EXPECT_EQ(stats.cache.memory, memory);
          // Epoch 0 reads every sample and later ones find them kept. With several ranks each epoch
          // gives a rank another share of the shuffled samples: later epochs find what earlier ones kept.
          EXPECT_GT(stats.cache.samples, 0u);
          EXPECT_EQ(stats.cache.not_kept, 0u);
          EXPECT_EQ(stats.cache.hits + stats.cache.misses, stats.samples);
          EXPECT_GT(stats.cache.hits, 0u);
          if (!sharded) {
            // Epoch 1's first batches may be decoded while epoch 0's last are in flight, not yet kept:
            // up to `prefetch` batches miss once more. Epoch 2 finds everything.
            const uint64_t in_flight = cached_config.pipeline.prefetch * cached_config.pipeline.batch_size;
            EXPECT_GE(stats.cache.hit_epochs, 1u) << "hits " << stats.cache.hits << ", misses " << stats.cache.misses;
            EXPECT_GE(stats.cache.misses, stats.samples / 3);
            EXPECT_LE(stats.cache.misses, stats.samples / 3 + in_flight);
          }
          EXPECT_GT(stats.cache.gathers, 0u);
        }
      }
    }
  }
}

TEST_F(DatasetCache, ARunResumedMidEpochInANewPipelineContinuesExactly) {
  for (const auto& [memory, device] : memories()) {
    for (const auto& [kind, yaml] : datasets()) {
      const std::string what = kind + ", " + memory + " memory";
      SCOPED_TRACE(what);
      Pipeline plain = make_pipeline(config(yaml, "off", device));
      const std::vector<Taken> expected = take(plain);
      // Stopped in the second epoch (the cache full) and in the first (half full); the new pipeline's
      // cache starts empty and fills from where it resumes.
      for (const size_t stop : {expected.size() / 2, size_t{2}}) {
        Pipeline first = make_pipeline(config(yaml, memory, device));
        std::vector<Taken> got = take(first, stop);
        const PipelineState state = parse_pipeline_state(first.state().to_json(), "state.json");
        first.close();
        Pipeline second = make_pipeline(config(yaml, memory, device), state);
        std::vector<Taken> rest = take(second);
        got.insert(got.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
        expect_same(expected, got, what + ", stopped after " + std::to_string(stop));
      }
    }
  }
}

TEST_F(DatasetCache, AnArenaTooSmallKeepsWhatFitsAndDeliversTheSameBatches) {
  const std::string yaml = datasets().at("jpeg-center-and-raw");
  Pipeline plain = make_pipeline(config(yaml, "off", "cpu"));
  const std::vector<Taken> expected = take(plain);
  Pipeline cached = make_pipeline(config(yaml, "host", "cpu", {"cache.max_bytes=64KiB"}));
  expect_same(expected, take(cached), "a 64 KiB cache");
  const PipelineStats stats = cached.stats();
  EXPECT_GT(stats.cache.not_kept, 0u);
  EXPECT_GT(stats.cache.samples, 0u);
  EXPECT_LE(stats.cache.used_bytes, 64u << 10);
  EXPECT_EQ(stats.cache.hit_epochs, 0u);
}

// The config's problems, or "" when it loads and checks.
std::string problems_of(const std::string& yaml, const std::vector<std::string>& overrides) {
  try {
    (void)check_config(parse_config(yaml, "cache.yaml", overrides));
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

TEST_F(DatasetCache, ValidationRefusesRandomCropsNamingTheField) {
  std::string yaml = datasets().at("jpeg-center-and-raw");
  yaml.replace(yaml.find("crop: center"), 12, "crop: random");
  const std::string problems = problems_of(yaml, {"cache.memory=host", "transfer.device=cpu"});
  EXPECT_NE(problems.find("cache.memory"), std::string::npos) << problems;
  EXPECT_NE(problems.find("field 'image' is decoded by 'jpeg' with a random crop"), std::string::npos) << problems;
  EXPECT_EQ(problems_of(yaml, {"cache.memory=off", "transfer.device=cpu"}), "");

  // The same rule for a program that hands make_pipeline() its own decoder.
  const Config center = parse_config(datasets().at("npy"), "cache.yaml", {"transfer.device=cpu"});
  PipelineOptions options = center.pipeline;
  options.cache.memory = CacheMemory::kHost;
  auto source = std::make_shared<const SyntheticSource>(SyntheticOptions{
      .seed = 1, .samples = 8, .fields = {SyntheticField{"image", at::kByte, {4, 4, 3}, false, 0, 0, std::nullopt}}});
  JpegDecodeOptions random;
  random.crop = JpegDecodeOptions::Crop::kRandom;
  const std::string refused = testing::error_of([&] {
    (void)make_pipeline(source, options, nullptr, {{"image", std::make_shared<JpegDecoder>(random)}});
  });
  EXPECT_TRUE(testing::contains(refused, "field 'image' is decoded by 'jpeg' with a random crop")) << refused;
}

TEST_F(DatasetCache, ValidationChecksSizesAndWhereTheCacheCanLive) {
  const std::string synthetic = datasets().at("synthetic");
  // 150 samples x (256 + 16 bytes) of fixed fields: more than max_bytes is refused, naming the key.
  const std::string npy = datasets().at("npy");
  std::string problems = problems_of(npy, {"cache.memory=host", "transfer.device=cpu", "cache.max_bytes=16KiB"});
  EXPECT_NE(problems.find("cache.max_bytes"), std::string::npos) << problems;
  EXPECT_NE(problems.find("more than cache.max_bytes"), std::string::npos) << problems;
  EXPECT_EQ(problems_of(npy, {"cache.memory=host", "transfer.device=cpu", "cache.max_bytes=1MiB"}), "");
  // With a variable-length field a smaller arena is allowed: what does not fit stays uncached.
  EXPECT_EQ(problems_of(synthetic, {"cache.memory=host", "transfer.device=cpu", "cache.max_bytes=4KiB"}), "");

  // A rank that visits the same share every epoch (no shuffle) needs room for that share only; with a
  // shuffle each epoch deals it other samples, and the room is for every sample it may visit.
  for (const bool shuffle : {false, true}) {
    Config sharded = parse_config(npy, "cache.yaml",
                                  {"cache.memory=host", "transfer.device=cpu", "sampler.rank=1", "sampler.world_size=3",
                                   "sampler.epochs=5", std::string("sampler.shuffle=") + (shuffle ? "true" : "false")});
    Pipeline pipeline = make_pipeline(sharded);
    EXPECT_EQ(pipeline.stats().cache.capacity_bytes, (shuffle ? 150u : 50u) * (256 + 16)) << "shuffle " << shuffle;
  }

  // A variable-length field with no max_length: the size is unknown without max_bytes.
  std::string raw = datasets().at("jpeg-center-and-raw");
  raw.erase(raw.find("cache: {max_bytes: 4MiB}"));
  problems = problems_of(raw, {"cache.memory=host", "transfer.device=cpu"});
  EXPECT_NE(problems.find("field 'bytes' is variable-length with no max_length"), std::string::npos) << problems;

  // More than the machine has: the samples (4 TB), or the index of a trillion samples.
  problems = problems_of(synthetic, {"cache.memory=host", "transfer.device=cpu", "source.samples=1000000",
                                     "source.fields.0.shape=[1000000]"});
  EXPECT_NE(problems.find("more than this machine's"), std::string::npos) << problems;
  problems = problems_of(synthetic, {"cache.memory=host", "transfer.device=cpu", "source.samples=1000000000000"});
  EXPECT_NE(problems.find("the cache's index of 1000000000000 samples"), std::string::npos) << problems;

  // GPU memory for a CPU pipeline, and host memory for a GPU one.
  problems = problems_of(synthetic, {"cache.memory=managed", "transfer.device=cpu"});
  EXPECT_NE(problems.find("delivers to cpu: use host"), std::string::npos) << problems;
  if (gpu_build() && cuda_device_count() > 0) {
    problems = problems_of(synthetic, {"cache.memory=host", "transfer.device=cuda:0"});
    EXPECT_NE(problems.find("use managed or device"), std::string::npos) << problems;
  }

  // Unknown values are refused by the loader.
  problems = problems_of(synthetic, {"cache.memory=gpu"});
  EXPECT_NE(problems.find("cache.memory"), std::string::npos) << problems;
}

TEST_F(DatasetCache, CacheToNeedsAManagedCache) {
  const std::string synthetic = datasets().at("synthetic");
  Pipeline host = make_pipeline(config(synthetic, "host", "cpu"));
  const std::string refused = testing::error_of([&] { host.cache_to(-1); });
  EXPECT_TRUE(testing::contains(refused, "only cache.memory: managed can")) << refused;
  Pipeline none = make_pipeline(config(synthetic, "off", "cpu"));
  EXPECT_THROW(none.cache_to(-1), Error);
  EXPECT_FALSE(none.stats().cache.enabled);
}

}  // namespace
}  // namespace ferry
