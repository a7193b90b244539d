// Pipelines built from YAML configs (load_pipeline, make_pipeline(const Config&)): every byte
// they deliver is the source's, in the order the config's sampler section asks for: sequential,
// shuffled per (seed, epoch), or one data-parallel rank's share, whether the rank comes from the
// config or from torchrun's environment. A config that cannot work fails before any thread starts.
//
// Every run here delivers to the CPU (this machine may have no GPU); the device only changes where
// the bytes land, which tests/cuda/ covers.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/assembly/config.h>
#include <ferry/assembly/config_error.h>
#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/assembly/torchrun_env.h>
#include <ferry/io/formats/tar_writer.h>
#include <ferry/io/samplers/sequential_sampler.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/pipeline.h>
#include <ferry/stages/batch_planner.h>
#include <ferry/stages/standard_pipeline.h>
#include "tests/support/random_options.h"
#include "tests/support/reference_batch.h"
#include "tests/support/thread_count.h"

namespace ferry {
namespace {

// ---- helpers -----------------------------------------------------------------------------------

// The seed of the random datasets: fixed, so a failure reproduces; FERRY_TEST_SEED picks another.
uint64_t test_seed() {
  const char* text = std::getenv("FERRY_TEST_SEED");
  return text != nullptr ? std::strtoull(text, nullptr, 0) : 0xc0f19ULL;
}

// Sets torchrun's variables (or unsets them all, for nullopt) for its lifetime, then puts back what
// was there. Tests that do not want torchrun's placement hold one with nullopt, so that running the
// suite under torchrun changes nothing. Not thread-safe (setenv): tests create it before any pipeline.
class ScopedTorchrunEnv {
 public:
  explicit ScopedTorchrunEnv(const std::optional<TorchrunEnv>& env) {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value != nullptr ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name);
    }
    if (env) {
      ::setenv("RANK", std::to_string(env->rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(env->world_size).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(env->local_rank).c_str(), 1);
      if (env->local_world_size > 1) ::setenv("LOCAL_WORLD_SIZE", std::to_string(env->local_world_size).c_str(), 1);
    }
  }
  // Raw strings, for malformed launches.
  ScopedTorchrunEnv(const char* rank, const char* world_size, const char* local_rank)
      : ScopedTorchrunEnv(std::nullopt) {
    ::setenv("RANK", rank, 1);
    ::setenv("WORLD_SIZE", world_size, 1);
    ::setenv("LOCAL_RANK", local_rank, 1);
  }
  ScopedTorchrunEnv(const ScopedTorchrunEnv&) = delete;
  ScopedTorchrunEnv& operator=(const ScopedTorchrunEnv&) = delete;
  ~ScopedTorchrunEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name, value->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }

 private:
  static constexpr const char* kNames[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

// A YAML file in the test's temporary directory, removed at the end of its scope.
class TempYaml {
 public:
  explicit TempYaml(const std::string& text) {
    std::string pattern = ::testing::TempDir() + "ferry_config_pipeline_XXXXXX";
    const int fd = ::mkstemp(pattern.data());
    EXPECT_GE(fd, 0) << "mkstemp " << pattern;
    if (fd >= 0) ::close(fd);
    path_ = pattern;
    std::ofstream(path_) << text;
  }
  TempYaml(const TempYaml&) = delete;
  TempYaml& operator=(const TempYaml&) = delete;
  ~TempYaml() { std::remove(path_.c_str()); }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

// The YAML name of a dtype, written out here rather than taken from ferry's own table.
std::string yaml_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte: return "uint8";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kFloat: return "float32";
    default: break;
  }
  ADD_FAILURE() << "no YAML name for " << dtype;
  return "?";
}

std::string number(double value) {
  std::ostringstream text;
  text << std::setprecision(17) << value;
  return text.str();
}

// The `source:` section that describes `options`.
std::string source_yaml(const SyntheticOptions& options) {
  std::ostringstream yaml;
  yaml << "source:\n  kind: synthetic\n  samples: " << options.samples << "\n  seed: " << options.seed
       << "\n  fields:\n";
  for (const SyntheticField& field : options.fields) {
    yaml << "    - {name: " << field.name << ", dtype: " << yaml_dtype(field.dtype) << ", shape: [";
    for (size_t d = 0; d < field.shape.size(); ++d) yaml << (d == 0 ? "" : ", ") << field.shape[d];
    yaml << "]";
    if (field.variable) yaml << ", length: [" << field.min_length << ", " << field.max_length << "]";
    if (field.range) yaml << ", range: [" << number(field.range->first) << ", " << number(field.range->second) << "]";
    yaml << "}\n";
  }
  return yaml.str();
}

// A dataset whose rows are told apart by `id` (two random int64 per sample) and that has a
// variable-length field too, so padding is checked in every run.
SyntheticOptions small_dataset(uint64_t samples, uint64_t seed) {
  SyntheticOptions options;
  options.seed = seed;
  options.samples = samples;
  options.fields = {
      SyntheticField{"id", at::kLong, {2}, false, 0, 0, std::nullopt},
      SyntheticField{"tokens", at::kInt, {}, true, 1, 5, std::pair{-1000.0, 1000.0}},
      SyntheticField{"w", at::kBFloat16, {3}, false, 0, 0, std::nullopt},
  };
  return options;
}

// What one run delivered: each batch's metadata, in delivery order.
struct Delivery {
  std::vector<BatchInfo> batches;
  uint64_t epochs = 0;  // epochs the run was asked for

  // The samples of each epoch, in delivery order.
  std::vector<std::vector<uint64_t>> per_epoch() const {
    std::vector<std::vector<uint64_t>> samples(epochs);
    for (const BatchInfo& batch : batches) {
      if (batch.epoch < epochs) {
        samples[batch.epoch].insert(samples[batch.epoch].end(), batch.sample_indices.begin(),
                                    batch.sample_indices.end());
      }
    }
    return samples;
  }
  std::vector<uint64_t> all_samples() const {
    std::vector<uint64_t> samples;
    for (const BatchInfo& batch : batches)
      samples.insert(samples.end(), batch.sample_indices.begin(), batch.sample_indices.end());
    return samples;
  }
};

// Runs `pipeline` to its end and checks every batch: on the CPU, numbered 0, 1, 2, ..., and every
// field byte for byte what `truth` makes for the samples the batch says it holds (so the
// indices are checked by the contents: `id` rows differ between samples). Returns what came.
Delivery drain(Pipeline pipeline, const SyntheticSource& truth, uint64_t epochs, const CollateOptions& collate = {}) {
  Delivery run;
  run.epochs = epochs;
  for (const Batch& batch : pipeline) {
    EXPECT_EQ(batch.sequence(), run.batches.size());
    EXPECT_EQ(batch.device(), at::Device(at::kCPU));
    const std::string problem = testing::compare_with_reference(batch, truth, collate);
    run.batches.push_back(batch.info());
    if (!problem.empty()) {
      ADD_FAILURE() << problem << "; samples of the batch: " << ::testing::PrintToString(batch.sample_indices());
      return run;  // one wrong batch is enough to read
    }
  }
  EXPECT_FALSE(pipeline.next()) << "the pipeline keeps reporting its end";
  const PipelineStats stats = pipeline.stats();
  EXPECT_EQ(stats.batches, run.batches.size());
  EXPECT_EQ(stats.pool.leased_bytes, 0u) << "a slab is still leased at the end of the run";
  return run;
}

// The epochs of `run` are cut into batches as batch_size and drop_last say, for epochs of
// `epoch_size` samples: batches 0, 1, ... of each epoch, full but for a smaller last one.
void expect_batching(const Delivery& run, uint64_t epoch_size, uint64_t batch_size, bool drop_last) {
  const uint64_t per_epoch = drop_last ? epoch_size / batch_size : (epoch_size + batch_size - 1) / batch_size;
  ASSERT_EQ(run.batches.size(), per_epoch * run.epochs);
  for (size_t b = 0; b < run.batches.size(); ++b) {
    const BatchInfo& batch = run.batches[b];
    EXPECT_EQ(batch.epoch, b / per_epoch);
    EXPECT_EQ(batch.index, b % per_epoch);
    const uint64_t first = batch.index * batch_size;
    EXPECT_EQ(batch.sample_indices.size(), std::min(batch_size, epoch_size - first)) << "batch " << b;
  }
}

std::vector<uint64_t> iota(uint64_t n) {
  std::vector<uint64_t> all(n);
  std::iota(all.begin(), all.end(), uint64_t{0});
  return all;
}

std::vector<uint64_t> sorted(std::vector<uint64_t> values) {
  std::sort(values.begin(), values.end());
  return values;
}

// ---- tests ---------------------------------------------------------------------------------------
// First in the file: counting threads is meaningful only before pipelines of other tests have run.

TEST(ConfigPipeline, ConfigErrorsStartNoThread) {
  const ScopedTorchrunEnv no_torchrun(std::nullopt);
  (void)cuda_device_count();  // the CUDA driver starts threads of its own on first use
  SyntheticOptions data;
  data.samples = 100;
  data.fields = {SyntheticField{"big", at::kFloat, {256}, false, 0, 0, std::nullopt}};
  const TempYaml file(source_yaml(data) +
                      "batch_size: 32\n"
                      "pool:\n"
                      "  slab_size: 1KiB\n"
                      "transfer:\n"
                      "  device: cpu\n");
  // The loader takes it (a slab size alone is fine); what the source makes is check_config's.
  const Config config = load_config(file.path());
  const size_t threads_before = testing::thread_count();

  auto expect_slab_problem = [&](const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u) << e.what();
    const ConfigProblem& problem = e.problems()[0];
    EXPECT_EQ(problem.key, "pool.slab_size") << e.what();
    // Located where the file sets it: line 9 (the source section takes lines 1-6).
    EXPECT_EQ(problem.location.rfind(file.path() + ":9:", 0), 0u) << problem.location;
    EXPECT_NE(problem.message.find("smaller than the largest batch"), std::string::npos) << problem.message;
  };
  try {
    (void)make_pipeline(config);
    ADD_FAILURE() << "make_pipeline accepted a 1 KiB slab for 32 KiB batches";
  } catch (const ConfigError& e) {
    expect_slab_problem(e);
  }
  EXPECT_EQ(testing::thread_count(), threads_before) << "make_pipeline(Config) started a thread before failing";

  try {
    (void)load_pipeline(file.path());
    ADD_FAILURE() << "from_yaml accepted a 1 KiB slab for 32 KiB batches";
  } catch (const ConfigError& e) {
    expect_slab_problem(e);
  }
  EXPECT_EQ(testing::thread_count(), threads_before) << "load_pipeline started a thread before failing";

  // A torchrun launch that makes no sense (RANK not below WORLD_SIZE) fails the same way.
  {
    const ScopedTorchrunEnv bad_launch("4", "4", "0");
    const TempYaml fine(source_yaml(data) + "transfer: {device: cpu}\n");
    try {
      (void)load_pipeline(fine.path());
      ADD_FAILURE() << "RANK=4 WORLD_SIZE=4 was accepted";
    } catch (const ConfigError& e) {
      ASSERT_EQ(e.problems().size(), 1u) << e.what();
      EXPECT_EQ(e.problems()[0].key, "sampler.rank") << e.what();
      EXPECT_NE(e.problems()[0].message.find("RANK"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(testing::thread_count(), threads_before) << "a bad torchrun environment started a thread";
}

// The one problem check_config() finds in a CPU config of `data`'s source followed by `tail`; nullopt
// when it finds none (more than one fails the test).
std::optional<ConfigProblem> the_problem(const SyntheticOptions& data, const std::string& tail) {
  const TempYaml file(source_yaml(data) + "transfer: {device: cpu}\n" + tail);
  try {
    (void)check_config(load_config(file.path()));
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.problems().size(), 1u) << e.what();
    return e.problems().at(0);
  }
  return std::nullopt;
}

TEST(ConfigPipeline, AnAugmentFieldThatIsNotAnImageIsReportedAtItsKey) {
  SyntheticOptions data;
  data.samples = 10;
  data.fields = {SyntheticField{"image", at::kByte, {6, 5, 3}, false, 0, 0, std::nullopt},
                 SyntheticField{"depth", at::kFloat, {6, 5, 3}, false, 0, 0, std::nullopt}};
  const auto problem = [&](const std::string& augment) { return the_problem(data, augment); };
  EXPECT_FALSE(problem("augment: {field: image, flip: 0.5}\n"));
  const auto missing = problem("augment: {field: photo}\n");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->key, "augment.field");
  EXPECT_NE(missing->message.find("no field 'photo' (its fields: image, depth)"), std::string::npos)
      << missing->message;
  const auto floats = problem("augment: {field: depth}\n");
  ASSERT_TRUE(floats);
  EXPECT_EQ(floats->key, "augment.field");
  EXPECT_NE(floats->message.find("field 'depth' must be uint8 images"), std::string::npos) << floats->message;
}

// Random datasets (all dtypes, ranks 0-3, empty dims, variable lengths, value ranges) written as YAML,
// loaded by load_pipeline with decode.threads 1, 2 and 4: the batches come in sequential order,
// cut as batch_size/drop_last say, padded with the config's pad values, every byte the source's.
// A pad value the field's dtype cannot hold is reported at the key that sets it (it was reported at
// source.fields), and a fixed-length field, never padded, does not care.
TEST(ConfigPipeline, APadValueThatDoesNotFitIsReportedAtItsKey) {
  SyntheticOptions data;
  data.samples = 10;
  data.fields = {SyntheticField{"image", at::kByte, {4}, false, 0, 0, std::nullopt},
                 SyntheticField{"tokens", at::kByte, {}, true, 1, 8, std::nullopt},
                 SyntheticField{"ids", at::kInt, {}, true, 1, 8, std::nullopt}};
  const auto problem = [&](const std::string& collate) { return the_problem(data, collate); };
  const auto general = problem("collate: {pad_value: 300}\n");
  ASSERT_TRUE(general);
  EXPECT_EQ(general->key, "collate.pad_value");
  EXPECT_NE(general->message.find("pad value 300 does not fit uint8 (field 'tokens' is uint8)"), std::string::npos)
      << general->message;
  EXPECT_NE(general->location.find(":10:"), std::string::npos) << general->location;  // the line that sets it
  const auto own = problem("collate: {pad_values: {ids: 3000000000}}\n");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->key, "collate.pad_values.ids");
  EXPECT_NE(own->message.find("does not fit int32"), std::string::npos) << own->message;
  // -1 fits neither uint8 field, but only the padded one matters; with its own value, none does.
  EXPECT_FALSE(problem("collate: {pad_value: -1, pad_values: {tokens: 0}}\n"));
}

TEST(ConfigPipeline, FromYamlDeliversEveryByteOfTheSource) {
  const ScopedTorchrunEnv no_torchrun(std::nullopt);
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_TEST_SEED)");
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](uint64_t low, uint64_t high) {
    return std::uniform_int_distribution<uint64_t>(low, high)(rng);
  };
  const at::ScalarType dtypes[] = {at::kByte, at::kInt, at::kLong, at::kHalf, at::kBFloat16, at::kFloat};
  for (int round = 0; round < 8; ++round) {
    const uint64_t batch_size = round == 0 ? 1 : uniform(2, 12);
    const uint64_t samples = uniform(1, 150);
    const uint64_t epochs = uniform(1, 2);
    // drop_last over fewer samples than a batch is a config error (no batch at all): not drawn here.
    const bool drop_last = uniform(0, 2) == 0 && samples >= batch_size;
    SyntheticOptions data = testing::random_synthetic_options(rng, samples);
    // A variable-length field in every round, so that padding and lengths are always checked.
    SyntheticField tail{"tail", dtypes[uniform(0, 5)], {}, true, 0, 0, std::nullopt};
    for (uint64_t d = uniform(0, 2); d > 0; --d) tail.shape.push_back(static_cast<int64_t>(uniform(1, 4)));
    tail.min_length = static_cast<int64_t>(uniform(0, 2));
    tail.max_length = tail.min_length + static_cast<int64_t>(uniform(1, 9));
    data.fields.push_back(tail);
    CollateOptions collate;
    collate.pad_value = static_cast<double>(uniform(0, 9));  // >= 0: uint8 fields take it too
    if (uniform(0, 1) == 0) collate.lengths_suffix = "_len";
    std::ostringstream yaml;
    yaml << source_yaml(data) << "batch_size: " << batch_size << "\nprefetch: " << uniform(1, 4)
         << "\nsampler:\n  epochs: " << epochs << "\n  drop_last: " << (drop_last ? "true" : "false")
         << "\ncollate:\n  pad_value: " << number(collate.pad_value)
         << "\n  lengths_suffix: " << collate.lengths_suffix;
    for (const SyntheticField& field : data.fields) {
      // Not on `tail`, which keeps the global pad value.
      if (field.variable && field.name != "tail" && uniform(0, 1) == 0) {
        collate.pad_values[field.name] = static_cast<double>(uniform(10, 99));
        yaml << "\n  pad_values: {" << field.name << ": " << number(collate.pad_values[field.name]) << "}";
        break;  // one per config: a second pad_values key would be a duplicate
      }
    }
    yaml << "\ntransfer:\n  device: cpu\n";
    const TempYaml file(yaml.str());
    SCOPED_TRACE("round " + std::to_string(round) + ", config:\n" + yaml.str());
    const SyntheticSource truth(data);  // from the options, not from the loader's reading of the file

    for (const size_t threads : {1, 2, 4}) {
      SCOPED_TRACE("decode.threads=" + std::to_string(threads));
      Pipeline pipeline = load_pipeline(file.path(), {"decode.threads=" + std::to_string(threads)});
      EXPECT_EQ(pipeline.options().decode_threads, threads);
      const Delivery run = drain(std::move(pipeline), truth, epochs, collate);
      BatchPlanner expected(std::make_shared<SequentialSampler>(samples), {batch_size, drop_last, epochs, 0});
      for (const BatchInfo& got : run.batches) {
        const std::optional<BatchPlan> plan = expected.next();
        ASSERT_TRUE(plan) << "an extra batch " << got.sequence;
        EXPECT_EQ(got.epoch, plan->epoch);
        EXPECT_EQ(got.index, plan->index);
        EXPECT_EQ(got.sample_indices, plan->sample_indices);
      }
      EXPECT_FALSE(expected.next()) << "batches missing after " << run.batches.size();
      expect_batching(run, samples, batch_size, drop_last);
    }
  }
}

TEST(ConfigPipeline, ShuffleVisitsEverySampleOncePerEpochInAnOrderFixedBySeedAndEpoch) {
  const ScopedTorchrunEnv no_torchrun(std::nullopt);
  constexpr uint64_t kSamples = 203;
  constexpr uint64_t kBatch = 16;
  constexpr uint64_t kEpochs = 3;
  const SyntheticOptions data = small_dataset(kSamples, 11);
  const SyntheticSource truth(data);
  const TempYaml file(source_yaml(data) +
                      "batch_size: 16\n"
                      "sampler:\n"
                      "  shuffle: true\n"
                      "  seed: 1234\n"
                      "  epochs: 3\n"
                      "transfer:\n"
                      "  device: cpu\n");
  auto run = [&](std::vector<std::string> overrides) {
    SCOPED_TRACE(::testing::PrintToString(overrides));
    Delivery got = drain(load_pipeline(file.path(), overrides), truth, kEpochs);
    expect_batching(got, kSamples, kBatch, false);
    return got;
  };

  const Delivery first = run({"decode.threads=2", "prefetch=3"});
  const auto epochs = first.per_epoch();
  ASSERT_EQ(epochs.size(), kEpochs);
  for (uint64_t e = 0; e < kEpochs; ++e) {
    EXPECT_EQ(sorted(epochs[e]), iota(kSamples)) << "epoch " << e << " is not a permutation of the samples";
    EXPECT_NE(epochs[e], iota(kSamples)) << "epoch " << e << " is not shuffled";
    for (uint64_t other = 0; other < e; ++other)
      EXPECT_NE(epochs[e], epochs[other]) << "epochs " << other << " and " << e;
  }

  // The order is the seed's and the epoch's alone: not the decode concurrency's, not prefetch's, not
  // how many epochs the run has.
  EXPECT_EQ(run({"decode.threads=2", "prefetch=3"}).all_samples(), first.all_samples()) << "same config, another order";
  EXPECT_EQ(run({"decode.threads=1", "prefetch=1"}).all_samples(), first.all_samples()) << "1 thread, prefetch 1";
  EXPECT_EQ(run({"decode.threads=4", "prefetch=6"}).all_samples(), first.all_samples()) << "4 threads, prefetch 6";
  EXPECT_EQ(run({"decode.threads=4", "prefetch=1"}).all_samples(), first.all_samples()) << "4 threads, prefetch 1";
  {
    const Delivery one_epoch = drain(load_pipeline(file.path(), {"sampler.epochs=1"}), truth, 1);
    EXPECT_EQ(one_epoch.per_epoch()[0], epochs[0]) << "epoch 0 depends on how many epochs follow";
  }

  const auto other_seed = run({"sampler.seed=1235"}).per_epoch();
  ASSERT_EQ(other_seed.size(), kEpochs);
  for (uint64_t e = 0; e < kEpochs; ++e) {
    EXPECT_EQ(sorted(other_seed[e]), iota(kSamples));
    EXPECT_NE(other_seed[e], epochs[e]) << "seeds 1234 and 1235 give the same epoch " << e;
  }

  // Without shuffle, every epoch is 0..n-1.
  for (const auto& epoch : run({"sampler.shuffle=false"}).per_epoch()) EXPECT_EQ(epoch, iota(kSamples));
}

// One pipeline per rank, as a data-parallel job would run them: together they cover each epoch
// exactly once (drop: the last n % W samples of the epoch's order left out; pad: the epoch's first
// samples repeated to fill the last round), every rank the same number of batches.
TEST(ConfigPipeline, RanksTogetherCoverEachSampleExactlyOncePerEpoch) {
  const ScopedTorchrunEnv no_torchrun(std::nullopt);
  constexpr uint64_t kEpochs = 2;
  for (const uint64_t n : {uint64_t{1001}, uint64_t{5}}) {
    const uint64_t batch_size = n > 100 ? 48 : 2;
    const SyntheticOptions data = small_dataset(n, 100 + n);
    const SyntheticSource truth(data);
    const TempYaml file(source_yaml(data) + "batch_size: " + std::to_string(batch_size) +
                        "\nsampler:\n  seed: 77\n  epochs: " + std::to_string(kEpochs) +
                        "\ndecode:\n  threads: 2\ntransfer:\n  device: cpu\n");
    for (const bool shuffle : {false, true}) {
      const std::string shuffle_set = std::string("sampler.shuffle=") + (shuffle ? "true" : "false");
      // The order every rank shares: one rank's run of the whole epoch.
      const auto global = drain(load_pipeline(file.path(), {shuffle_set}), truth, kEpochs).per_epoch();
      ASSERT_EQ(global.size(), kEpochs);
      for (const std::string remainder : {"pad", "drop"}) {
        for (uint64_t world = 1; world <= 8; ++world) {
          SCOPED_TRACE("n=" + std::to_string(n) + " " + shuffle_set + " sampler.remainder=" + remainder +
                       " world_size=" + std::to_string(world));
          const bool pad = remainder == "pad";
          const uint64_t per_rank = pad ? (n + world - 1) / world : n / world;
          if (per_rank == 0) {
            // Ranks that would get no sample at all: refused before anything starts.
            try {
              (void)load_pipeline(file.path(), {shuffle_set, "sampler.remainder=" + remainder, "sampler.rank=0",
                                                "sampler.world_size=" + std::to_string(world)});
              ADD_FAILURE() << "an empty shard was accepted";
            } catch (const ConfigError& e) {
              ASSERT_EQ(e.problems().size(), 1u);
              EXPECT_EQ(e.problems()[0].key, "sampler.remainder");
            }
            continue;
          }
          std::vector<Delivery> ranks;
          for (uint64_t rank = 0; rank < world; ++rank) {
            ranks.push_back(drain(load_pipeline(file.path(), {shuffle_set, "sampler.remainder=" + remainder,
                                                              "sampler.rank=" + std::to_string(rank),
                                                              "sampler.world_size=" + std::to_string(world)}),
                                  truth, kEpochs));
            SCOPED_TRACE("rank " + std::to_string(rank));
            expect_batching(ranks.back(), per_rank, batch_size, false);
            EXPECT_EQ(ranks.back().batches.size(), ranks.front().batches.size()) << "ranks disagree on the batch count";
          }
          for (uint64_t e = 0; e < kEpochs; ++e) {
            SCOPED_TRACE("epoch " + std::to_string(e));
            std::map<uint64_t, uint64_t> times;  // sample -> how often the ranks together delivered it
            uint64_t delivered = 0;
            for (uint64_t rank = 0; rank < world; ++rank) {
              const std::vector<uint64_t> mine = ranks[rank].per_epoch()[e];
              ASSERT_EQ(mine.size(), per_rank);
              for (uint64_t p = 0; p < mine.size(); ++p) {
                ++times[mine[p]];
                ++delivered;
                // ShardedSampler's documented layout: rank r takes global positions r, r + W, ...,
                // wrapping past the end (pad) to the epoch's first samples.
                EXPECT_EQ(mine[p], global[e][(p * world + rank) % n]) << "rank " << rank << " position " << p;
              }
            }
            if (pad) {
              const uint64_t extra = per_rank * world - n;
              EXPECT_EQ(delivered, n + extra);
              EXPECT_EQ(times.size(), n) << "a sample no rank delivered";
              uint64_t repeats = 0;
              for (const auto& [sample, count] : times) repeats += count - 1;
              EXPECT_EQ(repeats, extra);
              // The repeats are the epoch's first samples, once each.
              for (uint64_t k = 0; k < n; ++k) {
                EXPECT_EQ(times[global[e][k]], k < extra ? 2u : 1u) << "global position " << k;
              }
            } else {
              EXPECT_EQ(delivered, n / world * world);
              EXPECT_EQ(times.size(), delivered) << "a sample delivered by two ranks";
              for (uint64_t k = 0; k < n; ++k) {
                EXPECT_EQ(times.count(global[e][k]), k < n / world * world ? 1u : 0u) << "global position " << k;
              }
            }
          }
        }
      }
    }
  }
}

// Under torchrun, decode.threads: auto takes this process's share of the machine's cores
// (LOCAL_WORLD_SIZE processes share them), and the stats say so; a number given is taken as it is.
TEST(ConfigPipeline, TorchrunDecodeThreadsAutoShareTheMachinesCores) {
  const SyntheticOptions data = small_dataset(40, 5);
  const TempYaml file(source_yaml(data) + "batch_size: 64\nprefetch: 64\ntransfer: {device: cpu}\n");
  const size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t spare = hardware > 2 ? hardware - 2 : 1;
  {
    const ScopedTorchrunEnv torchrun(TorchrunEnv{0, 2, 0, 2});
    Pipeline pipeline = load_pipeline(file.path());
    const PipelineStats stats = pipeline.stats();
    EXPECT_EQ(stats.decode_threads_shared_by, 2u);
    EXPECT_EQ(stats.decode_threads, std::max<size_t>(1, spare / 2));
  }
  {
    const ScopedTorchrunEnv torchrun(TorchrunEnv{0, 2, 0, 2});
    Pipeline pipeline = load_pipeline(file.path(), {"decode.threads=3"});
    EXPECT_EQ(pipeline.stats().decode_threads_shared_by, 1u);
    EXPECT_EQ(pipeline.stats().decode_threads, 3u);
  }
  const ScopedTorchrunEnv no_torchrun(std::nullopt);
  Pipeline alone = load_pipeline(file.path());
  EXPECT_EQ(alone.stats().decode_threads_shared_by, 1u);
  EXPECT_EQ(alone.stats().decode_threads, spare);
}

// Under torchrun, with sampler.rank/world_size left unset, a pipeline delivers the shard of $RANK
// among $WORLD_SIZE: the same batches as a run given that rank and world size explicitly. What the
// config sets wins over the environment.
TEST(ConfigPipeline, TorchrunEnvironmentPicksRankAndWorldSize) {
  constexpr uint64_t kSamples = 37;
  constexpr uint64_t kWorld = 4;
  const SyntheticOptions data = small_dataset(kSamples, 5);
  const SyntheticSource truth(data);
  const TempYaml file(source_yaml(data) +
                      "batch_size: 3\n"
                      "sampler: {shuffle: true, seed: 9, epochs: 2}\n"
                      "decode: {threads: 2}\n"
                      "transfer: {device: cpu}\n");
  auto explicit_run = [&](uint64_t rank, uint64_t world) {
    const ScopedTorchrunEnv no_torchrun(std::nullopt);
    return drain(load_pipeline(file.path(),
                               {"sampler.rank=" + std::to_string(rank), "sampler.world_size=" + std::to_string(world)}),
                 truth, 2)
        .all_samples();
  };
  std::vector<uint64_t> everything;
  for (uint64_t rank = 0; rank < kWorld; ++rank) {
    SCOPED_TRACE("RANK=" + std::to_string(rank));
    const std::vector<uint64_t> expected = explicit_run(rank, kWorld);
    EXPECT_EQ(expected.size(), 2 * ((kSamples + kWorld - 1) / kWorld));
    std::vector<uint64_t> got;
    {
      const ScopedTorchrunEnv torchrun(TorchrunEnv{rank, kWorld, kWorld - 1 - rank});
      const Config config = load_config(file.path());
      EXPECT_FALSE(config.sampler.rank);
      EXPECT_FALSE(config.sampler.world_size);
      const Placement placement = resolve_placement(config.sampler, torchrun_env());
      EXPECT_EQ(placement.rank, rank);
      EXPECT_EQ(placement.world_size, kWorld);
      EXPECT_EQ(placement.local_rank, kWorld - 1 - rank);
      EXPECT_TRUE(placement.torchrun);
      got = drain(make_pipeline(config), truth, 2).all_samples();
    }
    EXPECT_EQ(got, expected) << "the environment's rank " << rank << " of " << kWorld << " is not its shard";
    everything.insert(everything.end(), got.begin(), got.end());
  }
  // The four shards are not the same shard four times.
  std::sort(everything.begin(), everything.end());
  EXPECT_EQ(std::unique(everything.begin(), everything.end()) - everything.begin(), static_cast<ptrdiff_t>(kSamples));

  // The config's rank and world size win over torchrun's.
  {
    const std::vector<uint64_t> expected = explicit_run(1, 2);
    const ScopedTorchrunEnv torchrun(TorchrunEnv{3, 4, 3});
    EXPECT_EQ(drain(load_pipeline(file.path(), {"sampler.rank=1", "sampler.world_size=2"}), truth, 2).all_samples(),
              expected);
  }

  // "cuda" means this rank's GPU under torchrun; anything else stays (a pure function: no GPU needed).
  Config config = load_config(file.path(), {"batch_size=5"});
  const Placement torchrun{3, 4, 3, true};
  const Placement single{};
  config.pipeline.device = "cuda";
  EXPECT_EQ(resolve_pipeline_options(config, torchrun).device, "cuda:3");
  EXPECT_EQ(resolve_pipeline_options(config, torchrun).batch_size, 5u) << "other options pass through";
  EXPECT_EQ(resolve_pipeline_options(config, single).device, "cuda");
  config.pipeline.device = "cpu";
  EXPECT_EQ(resolve_pipeline_options(config, torchrun).device, "cpu");
  config.pipeline.device = "cuda:1";
  EXPECT_EQ(resolve_pipeline_options(config, torchrun).device, "cuda:1") << "an explicit device index stays";
  config.pipeline.device = "auto";
  EXPECT_EQ(resolve_pipeline_options(config, torchrun).device,
            gpu_build() && cuda_device_count() > 0 ? "cuda:3" : "auto");
  EXPECT_EQ(resolve_pipeline_options(config, single).device, "auto");
  // Several ranks: skipped samples are replaced, so that every rank keeps its number of batches.
  EXPECT_TRUE(resolve_pipeline_options(config, torchrun).skip_replaces);
  EXPECT_TRUE(resolve_pipeline_options(config, Placement{1, 2, 0, false}).skip_replaces);
  EXPECT_FALSE(resolve_pipeline_options(config, single).skip_replaces);
}

// A tar source from YAML: labels through the `label` decoder, payloads as padded bytes, every value
// as written, in shard order.
TEST(ConfigPipeline, TarShardsFromYamlDeliverTheirMembers) {
  std::mt19937_64 rng(test_seed());
  std::vector<std::pair<int64_t, std::string>> written;  // (label, payload) per sample, in order
  std::vector<std::unique_ptr<TempYaml>> shards;
  std::string shard_list;
  for (int s = 0; s < 3; ++s) {
    TarWriter tar;
    for (int k = 0; k < 7; ++k) {
      const int64_t label = static_cast<int64_t>(rng() % 1000);
      std::string payload(rng() % 40 + 1, '\0');
      for (char& c : payload) c = static_cast<char>(rng());
      char key[16];
      std::snprintf(key, sizeof key, "%06d", s * 100 + k);
      tar.add(std::string(key) + ".cls", std::to_string(label) + "\n");
      tar.add(std::string(key) + ".bin", payload);
      written.emplace_back(label, payload);
    }
    shards.push_back(std::make_unique<TempYaml>(""));
    TarWriter::write_file(shards.back()->path(), tar.finish());
    shard_list += (s == 0 ? "" : ", ") + shards.back()->path();
  }
  const TempYaml file("source:\n  kind: tar\n  shards: [" + shard_list +
                      "]\n  members:\n    - {name: label, extension: cls, dtype: int64, shape: [], decoder: label}\n"
                      "    - {name: payload, extension: bin, max_length: 40}\nbatch_size: 5\ncollate: {pad_value: 0}\n"
                      "transfer: {device: cpu}\ndecode: {threads: 3}\n");
  Pipeline pipeline = load_pipeline(file.path());
  size_t next = 0;
  while (auto batch = pipeline.next()) {
    const at::Tensor labels = (*batch)["label"];
    const at::Tensor payloads = (*batch)["payload"];
    const at::Tensor lengths = (*batch)["payload_lengths"];
    for (int64_t row = 0; row < labels.size(0); ++row, ++next) {
      ASSERT_LT(next, written.size());
      EXPECT_EQ(labels[row].item<int64_t>(), written[next].first);
      const std::string& payload = written[next].second;
      ASSERT_EQ(lengths[row].item<int64_t>(), static_cast<int64_t>(payload.size()));
      EXPECT_EQ(std::memcmp(payloads[row].data_ptr(), payload.data(), payload.size()), 0) << "sample " << next;
    }
  }
  EXPECT_EQ(next, written.size());
}

// Without a shape or a max_length, a tar member's largest batch is unknown: the config names the
// field and says what to give it, where the members are set.
TEST(ConfigPipeline, ATarFieldWithNoMaximumIsNamedWithWhatToGiveIt) {
  TarWriter tar;
  tar.add("000000.cls", "1\n");
  tar.add("000000.jpg", "not really a jpeg");
  const TempYaml shard("");
  TarWriter::write_file(shard.path(), tar.finish());
  const TempYaml file("source:\n  kind: tar\n  shards: " + shard.path() + "\n");
  try {
    (void)check_config(load_config(file.path()));
    FAIL() << "a variable-length field with no maximum was accepted";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u) << e.what();
    const ConfigProblem& problem = e.problems()[0];
    EXPECT_EQ(problem.key, "source.members");
    EXPECT_EQ(problem.location, file.path() + ":2:3");
    for (const char* part : {"field 'jpg' is variable-length with no max_length", "extension: jpg, decoder: jpeg",
                             "or for images of their own size a max_pixels", "or set pool.slab_size"}) {
      EXPECT_NE(problem.message.find(part), std::string::npos) << "no '" << part << "' in: " << problem.message;
    }
  }
  // A listed member that is not an image: its own name and extension, and a max_length first.
  TarWriter other;
  other.add("000000.bin", "payload");
  TarWriter::write_file(shard.path(), other.finish());
  const TempYaml listed("source:\n  kind: tar\n  shards: " + shard.path() +
                        "\n  members: [{name: payload, extension: bin}]\n");
  try {
    (void)check_config(load_config(listed.path()));
    FAIL() << "a variable-length field with no maximum was accepted";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u) << e.what();
    const std::string& message = e.problems()[0].message;
    for (const char* part : {"field 'payload' is variable-length with no max_length",
                             "give it a max_length (its longest first dimension), e.g. {name: payload, extension: bin, "
                             "max_length: 65536}"}) {
      EXPECT_NE(message.find(part), std::string::npos) << "no '" << part << "' in: " << message;
    }
    EXPECT_EQ(message.find("jpeg"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace ferry
