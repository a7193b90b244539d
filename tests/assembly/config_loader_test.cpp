#include <ferry/assembly/config_loader.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include <ferry/assembly/config_schema.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/io/decoders/image_decoder.h>
#include <ferry/io/decoders/jpeg_decoder.h>
#include <ferry/io/decoders/png_decoder.h>
#include <ferry/io/decoders/sentencepiece_model.h>
#include <ferry/io/formats/image_folder_source.h>
#include <ferry/io/formats/indexed_dataset_writer.h>
#include <ferry/io/formats/source_registry.h>
#include <ferry/io/formats/synthetic_source.h>
#include <ferry/io/formats/tar_writer.h>
#include <ferry/io/transforms/transform_registry.h>
#include <ferry/io/util/units.h>
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

constexpr const char* kMinimal = R"(
source:
  kind: synthetic
  fields:
    - {name: image, dtype: uint8, shape: [3, 8, 8]}
    - {name: tokens, dtype: int32, length: [1, 16]}
)";

std::string problems_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    (void)parse_config(yaml, "test.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ByteSize, ReadsPlainNumbersAndDecimalAndBinaryUnits) {
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("64MiB"), uint64_t{64} << 20);
  EXPECT_EQ(parse_byte_size("64 MiB"), uint64_t{64} << 20);
  EXPECT_EQ(parse_byte_size("1.5GB"), 1'500'000'000u);
  EXPECT_EQ(parse_byte_size("1.5KiB"), 1536u);
  EXPECT_EQ(parse_byte_size("2g"), uint64_t{2} << 30);
  EXPECT_EQ(parse_byte_size("10kb"), 10'000u);
  EXPECT_EQ(parse_byte_size("1TiB"), uint64_t{1} << 40);
  EXPECT_EQ(parse_byte_size("0"), 0u);
  EXPECT_EQ(parse_byte_size("1.001KB"), 1001u) << "exact decimals: no binary rounding to 1000.999...";
  EXPECT_EQ(parse_byte_size(".5KiB"), 512u);
  EXPECT_EQ(parse_byte_size("8191.75KiB"), 8388352u);
  for (const char* bad : {"", "MiB", "-1", "1.3B", "12 parsecs", "0x10", "1e3", "64MiBs", "20000000TB"}) {
    EXPECT_FALSE(parse_byte_size(bad).has_value()) << bad;
  }
}

TEST(ByteSize, PrintsBinarySizesAndDecimalAmounts) {
  EXPECT_EQ(format_byte_size(4096), "4 KiB");
  EXPECT_EQ(format_byte_size(1536), "1.50 KiB");
  EXPECT_EQ(format_byte_size(100), "100 B");
  EXPECT_EQ(format_decimal_bytes(0), "0 B");
  EXPECT_EQ(format_decimal_bytes(999), "999 B");
  EXPECT_EQ(format_decimal_bytes(131'136), "131.14 KB");
  EXPECT_EQ(format_decimal_bytes(38.5e6), "38.50 MB");
  EXPECT_EQ(format_decimal_bytes(2.5e15), "2500.00 TB");
  EXPECT_EQ(format_decimal_bytes(-3), "0 B");
}

TEST(Duration, ReadsSecondsMillisecondsAndMinutes) {
  EXPECT_EQ(parse_duration("5s"), std::chrono::milliseconds(5000));
  EXPECT_EQ(parse_duration("500ms"), std::chrono::milliseconds(500));
  EXPECT_EQ(parse_duration("0.5s"), std::chrono::milliseconds(500));
  EXPECT_EQ(parse_duration("2m"), std::chrono::milliseconds(120000));
  EXPECT_EQ(parse_duration("3"), std::chrono::milliseconds(3000));
  for (const char* bad : {"", "s", "5 parsecs", "-1s", "5h"}) EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
}

TEST(ConfigLoader, TheSmallestConfigIsASourceAndGetsTheDefaults) {
  const Config config = parse_config(kMinimal, "test.yaml");
  EXPECT_EQ(config.origin, "test.yaml");
  EXPECT_EQ(config.source.kind, "synthetic");
  const SyntheticOptions synthetic = synthetic_options(config.source.keys);
  ASSERT_EQ(synthetic.fields.size(), 2u);
  EXPECT_EQ(synthetic.samples, 1024u);
  const SyntheticField& tokens = synthetic.fields[1];
  EXPECT_TRUE(tokens.variable);
  EXPECT_EQ(tokens.min_length, 1);
  EXPECT_EQ(tokens.max_length, 16);
  const PipelineOptions defaults;
  EXPECT_EQ(config.pipeline.batch_size, defaults.batch_size);
  EXPECT_EQ(config.pipeline.prefetch, defaults.prefetch);
  EXPECT_EQ(config.pipeline.device, "auto");
  EXPECT_EQ(config.pipeline.on_error, OnError::kFail);
  EXPECT_FALSE(config.sampler.shuffle);
  EXPECT_FALSE(config.sampler.rank.has_value());
  EXPECT_EQ(config.stats.progress, StatsConfig::Progress::kAuto);
  EXPECT_EQ(config.where("source.fields[1].length"), "test.yaml:6:44");
}

TEST(ConfigLoader, ReadsEveryKeyIntoItsField) {
  const Config config = parse_config(R"(
source:
  kind: synthetic
  samples: 500
  seed: 9
  fields:
    - {name: image, dtype: bfloat16, shape: [2, 3], range: [-2, 2]}
    - {name: tokens, dtype: int64, shape: [4], length: [3, 7]}
batch_size: 12
prefetch: 5
max_batches: 40
sampler: {shuffle: yes, seed: 77, epochs: 3, drop_last: true, rank: 1, world_size: 4, remainder: drop}
decode: {threads: 6, on_error: skip, decoders: {image: raw}}
collate: {pad_value: -1.5, pad_values: {tokens: 9}, lengths_suffix: _len}
pool: {slab_size: 2MiB, slab_count: 7, budget: 1GB}
transfer: {device: cuda:1, stream_priority: high, wait: spin, max_chunk: 8MiB, alignment: 64, parallel_pack: 4MiB, direct_copy: 0}
stats: {progress: plain, interval: 1500ms, report: out.json}
)",
                                     "all.yaml");
  const SyntheticOptions source = synthetic_options(config.source.keys);
  EXPECT_EQ(source.samples, 500u);
  EXPECT_EQ(source.seed, 9u);
  EXPECT_EQ(source.fields[0].dtype, at::kBFloat16);
  EXPECT_EQ(source.fields[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(source.fields[0].range, (std::pair<double, double>{-2, 2}));
  EXPECT_EQ(source.fields[1].shape, (std::vector<int64_t>{4}));
  const PipelineOptions& options = config.pipeline;
  EXPECT_EQ(options.batch_size, 12u);
  EXPECT_EQ(options.prefetch, 5u);
  EXPECT_EQ(options.max_batches, 40u);
  EXPECT_EQ(options.epochs, 3u);
  EXPECT_TRUE(options.drop_last);
  EXPECT_TRUE(config.sampler.shuffle);
  EXPECT_EQ(config.sampler.seed, 77u);
  EXPECT_EQ(config.sampler.rank, 1u);
  EXPECT_EQ(config.sampler.world_size, 4u);
  EXPECT_TRUE(config.sampler.drop_remainder);
  EXPECT_EQ(options.decode_threads, 6u);
  EXPECT_EQ(options.on_error, OnError::kSkip);
  EXPECT_EQ(options.decoders.at("image"), "raw");
  EXPECT_EQ(options.collate.pad_value, -1.5);
  EXPECT_EQ(options.collate.pad_values.at("tokens"), 9);
  EXPECT_EQ(options.collate.lengths_suffix, "_len");
  EXPECT_EQ(options.pool.slab_bytes, size_t{2} << 20);
  EXPECT_EQ(options.pool.slab_count, 7u);
  EXPECT_EQ(options.pool.budget_bytes, 1'000'000'000u);
  EXPECT_EQ(options.device, "cuda:1");
  EXPECT_TRUE(options.transfer.high_priority_stream);
  EXPECT_EQ(options.transfer.wait, WaitMode::kSpin);
  EXPECT_EQ(options.transfer.max_chunk_bytes, size_t{8} << 20);
  EXPECT_EQ(options.transfer.min_alignment, 64u);
  EXPECT_EQ(options.transfer.parallel_pack_bytes, size_t{4} << 20);
  EXPECT_EQ(options.transfer.direct_copy_bytes, 0u);
  EXPECT_EQ(config.stats.progress, StatsConfig::Progress::kPlain);
  EXPECT_EQ(config.stats.interval, std::chrono::milliseconds(1500));
  EXPECT_EQ(config.stats.report_path, "out.json");
  EXPECT_EQ(config.where("pool.slab_size"), "all.yaml:15:19");
}

TEST(ConfigOverrides, SetNestedKeysSizesAndLists) {
  const Config config = parse_config(
      kMinimal, "test.yaml",
      {"pool.slab_size=1.5MiB", "sampler.shuffle=true", "transfer.device=cpu", "source.fields.0.shape=[4, 4]",
       "source.fields[1].length=[2, 3]", "collate.pad_values={tokens: -7}", "batch_size=3"});
  EXPECT_EQ(config.pipeline.pool.slab_bytes, size_t{3} << 19);
  EXPECT_TRUE(config.sampler.shuffle);
  EXPECT_EQ(config.pipeline.device, "cpu");
  EXPECT_EQ(synthetic_options(config.source.keys).fields[0].shape, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(synthetic_options(config.source.keys).fields[1].max_length, 3);
  EXPECT_EQ(config.pipeline.collate.pad_values.at("tokens"), -7);
  EXPECT_EQ(config.pipeline.batch_size, 3u);
  EXPECT_EQ(config.where("pool.slab_size"), "--set pool.slab_size=1.5MiB");
  EXPECT_EQ(config.where("source.fields[0].shape"), "--set source.fields.0.shape=[4, 4]");
  EXPECT_EQ(config.where("source.fields[0].dtype"), "test.yaml:5:28");
}

TEST(ConfigOverrides, AppendToAListAndReplaceAWholeSection) {
  const Config appended = parse_config(kMinimal, "test.yaml", {"source.fields.2={name: label, dtype: int64}"});
  ASSERT_EQ(synthetic_options(appended.source.keys).fields.size(), 3u);
  EXPECT_EQ(synthetic_options(appended.source.keys).fields[2].name, "label");
  const Config replaced = parse_config(kMinimal, "test.yaml",
                                       {"source={kind: synthetic, samples: 5, fields: [{name: x, dtype: float32}]}"});
  ASSERT_EQ(synthetic_options(replaced.source.keys).fields.size(), 1u);
  EXPECT_EQ(synthetic_options(replaced.source.keys).samples, 5u);
}

TEST(ConfigOverrides, BadOverridesAreReportedAtTheirFlag) {
  EXPECT_NE(problems_of(kMinimal, {"batch_size"}).find("--set batch_size: expected key.path=value"), std::string::npos);
  EXPECT_NE(problems_of(kMinimal, {"source.fields.5.name=x"})
                .find("--set source.fields.5.name=x: source.fields: '5' is not an index"),
            std::string::npos);
  EXPECT_NE(problems_of(kMinimal, {"source.kind.x=1"})
                .find("--set source.kind.x=1: source.kind.x: cannot set a key inside 'synthetic'"),
            std::string::npos);
  EXPECT_NE(problems_of(kMinimal, {"prefetch=[1"}).find("--set prefetch=[1: prefetch: invalid YAML value"),
            std::string::npos);
  EXPECT_NE(problems_of(kMinimal, {"batch_size.=7"}).find("--set batch_size.=7: batch_size.: expected key.path=value"),
            std::string::npos);
  // Malformed paths are refused, saying what is wrong, instead of guessed at.
  const std::pair<const char*, const char*> malformed[] = {
      {"source.fields[0.name=x", "'[' at character 14 is not closed"},
      {"source[fields].0.name=x", "'[fields]' is not a list index"},
      {"source.fields[0]name=x", "expected '.' or '[' after ']' at character 17"},
      {"source.fields]0.name=x", "']' at character 14 was not opened"},
      {"[0].name=x", "'[' at character 1 does not follow a key"},
      {"source..kind=x", "an empty key name at character 8"},
      {"source.fields[].name=x", "'[]' is not a list index"},
      {"batch_size.=7", "key names must not be empty"},
  };
  for (const auto& [flag, why] : malformed) {
    const std::string found = problems_of(kMinimal, {flag});
    EXPECT_NE(found.find(std::string("--set ") + flag), std::string::npos) << found;
    EXPECT_NE(found.find(why), std::string::npos) << flag << ": " << found;
  }
  // Both list spellings are the same path.
  for (const char* flag : {"source.fields[1].name=x", "source.fields.1.name=x"}) {
    EXPECT_EQ(synthetic_options(parse_config(kMinimal, "t.yaml", {flag}).source.keys).fields.at(1).name, "x") << flag;
  }
  // A field appended by --set is located there, down to the keys it lacks.
  EXPECT_NE(problems_of(kMinimal, {"source.fields.2.name=y"})
                .find("--set source.fields.2.name=y: source.fields[2].dtype: missing required key"),
            std::string::npos)
      << problems_of(kMinimal, {"source.fields.2.name=y"});
}

TEST(Placement, ConfigOverridesTorchrunButNeedsARankForAnotherWorldSize) {
  const TorchrunEnv env{3, 8, 1};
  const Placement from_env = resolve_placement(SamplerConfig{}, env);
  EXPECT_EQ(from_env.rank, 3u);
  EXPECT_EQ(from_env.world_size, 8u);
  EXPECT_EQ(from_env.local_rank, 1u);
  EXPECT_TRUE(from_env.torchrun);
  SamplerConfig same;
  same.world_size = 8;
  EXPECT_EQ(resolve_placement(same, env).rank, 3u);
  SamplerConfig whole;
  whole.world_size = 1;
  try {
    (void)resolve_placement(whole, env);
    FAIL() << "a world size other than torchrun's needs an explicit rank";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("sampler.world_size is 1 but torchrun's WORLD_SIZE is 8: set sampler.rank as well"),
        std::string::npos)
        << e.what();
  }
  whole.rank = 0;
  EXPECT_EQ(resolve_placement(whole, env).rank, 0u);
  EXPECT_EQ(resolve_placement(SamplerConfig{}, std::nullopt).world_size, 1u);
}

TEST(ConfigLoader, ReadsTheAugmentKeysAndNamesEachBadOne) {
  const Config config = parse_config(std::string(kMinimal) + R"(
augment:
  field: image
  random_resized_crop: {size: [224, 200], scale: [0.25, 0.9], ratio: [0.5, 2]}
  flip: 0.5
  normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
  dtype: bfloat16
  layout: NHWC
)",
                                     "test.yaml");
  const AugmentOptions& augment = config.pipeline.augment;
  EXPECT_EQ(augment.field, "image");
  EXPECT_TRUE(augment.crops());
  EXPECT_EQ(augment.height, 224);
  EXPECT_EQ(augment.width, 200);
  EXPECT_EQ(augment.scale_min, 0.25);
  EXPECT_EQ(augment.scale_max, 0.9);
  EXPECT_EQ(augment.ratio_min, 0.5);
  EXPECT_EQ(augment.ratio_max, 2.0);
  EXPECT_EQ(augment.flip, 0.5);
  EXPECT_TRUE(augment.normalize);
  EXPECT_EQ(augment.std[2], 0.225);
  EXPECT_EQ(augment.dtype, AugmentOptions::DType::kBFloat16);
  EXPECT_EQ(augment.layout, AugmentOptions::Layout::kNHWC);
  EXPECT_FALSE(parse_config(kMinimal, "test.yaml").pipeline.augment.enabled()) << "no augment section: off";
  // A bare section augments `image`: values / 255, NCHW float32, whole images.
  const AugmentOptions plain = parse_config(kMinimal, "test.yaml", {"augment={}"}).pipeline.augment;
  EXPECT_EQ(plain.field, "image");
  EXPECT_FALSE(plain.crops());
  EXPECT_FALSE(plain.normalize);

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"augment.flip=1.5", "augment.flip: expected a probability in 0..1"},
      {"augment.random_resized_crop.size=[0, 5]",
       "augment.random_resized_crop.size[0]: expected an integer in 1..65535"},
      {"augment.random_resized_crop.size=[5]", "augment.random_resized_crop.size: expected [height, width]"},
      {"augment.random_resized_crop.scale=[0.5, 0.2]",
       "augment.random_resized_crop.scale: expected [min, max] with 0 < min <= max <= 1"},
      {"augment.random_resized_crop.ratio=[0, 1]",
       "augment.random_resized_crop.ratio: expected [min, max] with 0 < min <= max"},
      {"augment.normalize.std=[0.2, 0, 0.2]", "augment.normalize.std[1]: expected a number > 0"},
      {"augment.normalize.mean=[1, 2]", "augment.normalize.mean: expected a list of 3 numbers"},
      {"augment.dtype=float64", "augment.dtype: expected one of float32, float16, bfloat16"},
      {"augment.layout=CHW", "augment.layout: expected one of NCHW, NHWC"},
      {"augment.crop=1", "augment.crop: unknown key"},
  };
  for (const auto& [set, message] : bad) {
    EXPECT_NE(problems_of(kMinimal, {set}).find(message), std::string::npos)
        << set << ": " << problems_of(kMinimal, {set});
  }
}

// An image folder with one class and one file, for configs whose root must exist.
// A file where a config needs one that exists (a tar shard) and only its keys are checked.
const std::string& a_shard() {
  static const testing::TempDir dir("ferry_config_shard");
  static const std::string path = [] {
    std::ofstream(dir / "shard.tar") << "";
    return dir / "shard.tar";
  }();
  return path;
}

class ImageRoot {
 public:
  ImageRoot() {
    ::mkdir((dir_ / "cat").c_str(), 0755);
    std::ofstream(dir_ / "cat/0.jpg") << "x";
  }
  const std::string& path() const { return dir_.path(); }

 private:
  testing::TempDir dir_{"ferry_config_images"};
};

TEST(ConfigLoader, ReadsWhereAJpegFieldIsDecodedAndRefusesItElsewhere) {
  const ImageRoot root;
  const std::string folder = "source: {kind: image_folder, root: " + root.path() +
                             ", image: {shape: [8, 8, 3], resize_shorter: 8, device: auto}}\n";
  const auto device_of = [](const Config& config) {
    const FieldDecoders decoders = make_field_decoders(config, *make_source(config.source));
    const auto* jpeg = dynamic_cast<const JpegDecoder*>(decoders.at("image").get());
    return jpeg != nullptr ? jpeg->options().device : ImageDecodeOptions::Device::kCpu;
  };
  EXPECT_EQ(device_of(parse_config(folder, "test.yaml")), ImageDecodeOptions::Device::kAuto);
  EXPECT_EQ(device_of(parse_config(folder, "test.yaml", {"source.image.device=gpu"})),
            ImageDecodeOptions::Device::kGpu);
  EXPECT_NE(
      problems_of(folder, {"source.image.device=tpu"}).find("source.image.device: expected one of cpu, gpu, auto"),
      std::string::npos);
  EXPECT_NE(problems_of(folder, {"source.image.decoder=png"})
                .find("device is a key of the decoder jpeg; this field's decoder is 'png' (set decoder: jpeg, or "
                      "remove device)"),
            std::string::npos)
      << problems_of(folder, {"source.image.decoder=png"});
  // The dataset cache is checked with the source (check_config()).
  const auto checked = [&](const std::vector<std::string>& overrides) {
    try {
      (void)check_config(parse_config(folder, "test.yaml", overrides));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // device: gpu cannot go with the cache; auto then decodes on the CPU, on every build.
  EXPECT_NE(checked({"cache.memory=host", "source.image.device=gpu"}).find("is decoded on the GPU (device: gpu)"),
            std::string::npos)
      << checked({"cache.memory=host", "source.image.device=gpu"});
  EXPECT_EQ(checked({"cache.memory=host", "transfer.device=cpu"}), "");
}

// What a file under the 16 MiB cap can hold is bounded before any node is built: nesting past 100
// levels, more than 200 000 values, and a list of problems past 100 (the rest counted).
TEST(ConfigLoader, DeepOrHugeConfigsAreRefusedNamingWhyAndProblemsAreCapped) {
  const std::string valid = "source: {kind: synthetic, samples: 8, fields: [{name: x, dtype: uint8, shape: [4]}]}\n";
  for (const char* open : {"[", "{a: ", "[{b: "}) {
    std::string deep = valid + "plugins: ";
    for (int i = 0; i < 120; ++i) deep += open;
    EXPECT_NE(problems_of(deep).find("nested more than 100 levels deep"), std::string::npos) << problems_of(deep);
  }
  // Brackets inside quotes and comments are not nesting.
  EXPECT_EQ(
      problems_of(valid + "batch_size: 4 # " + std::string(300, '[') + "\nplugins: ['" + std::string(300, '[') + "']\n")
          .find("nested"),
      std::string::npos);
  std::string many = valid + "plugins: [";
  for (int i = 0; i < 250000; ++i) many += "a, ";
  many += "a]\n";
  EXPECT_NE(problems_of(many).find("more than 200000 values: too many for a config"), std::string::npos);
  std::string unknown = valid + "batch_size: 4\n";
  for (int i = 0; i < 5000; ++i) unknown += "key" + std::to_string(i) + ": 1\n";
  try {
    (void)parse_config(unknown, "test.yaml");
    ADD_FAILURE() << "unknown keys were accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.problems().size(), ConfigError::kMaxListed);
    EXPECT_EQ(e.more(), 5000 - ConfigError::kMaxListed);
    EXPECT_NE(std::string(e.what()).find("... and 4900 more (fix these first)"), std::string::npos);
  }
}

TEST(ConfigLoader, AnEmptyFileNamesTheMissingSource) {
  EXPECT_NE(problems_of("").find("source: missing required key"), std::string::npos);
  EXPECT_NE(problems_of("# just a comment\n").find("source: missing required key"), std::string::npos);
}

// Found by tests/fuzz/config_loader_fuzz: yaml-cpp 0.7's LoadAll never returns where a document
// starts with ',' (it reads an empty document there forever, until memory runs out).
TEST(ConfigLoader, ACommaWhereADocumentStartsIsRefusedNotReadForever) {
  EXPECT_NE(problems_of(",").find("test.yaml:1:1: invalid YAML: unexpected ',' where a document starts"),
            std::string::npos)
      << problems_of(",");
  const std::string after = std::string(kMinimal) + "---\n  ,\n";
  EXPECT_NE(problems_of(after).find("test.yaml:8:3: invalid YAML: unexpected ','"), std::string::npos)
      << problems_of(after);
  // Two documents are still counted and located at the second one's first key.
  EXPECT_NE(problems_of(std::string(kMinimal) + "---\nbatch_size: 3\n---\n")
                .find("test.yaml:8:1: a config is one YAML document; this file holds 3 (separated by ---)"),
            std::string::npos)
      << problems_of(std::string(kMinimal) + "---\nbatch_size: 3\n---\n");
}

TEST(ConfigLoader, AMissingFileSaysSo) {
  try {
    (void)load_config("/nonexistent/ferry.yaml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/ferry.yaml: cannot open the config file: No such file"),
              std::string::npos)
        << e.what();
  }
}

// A directory and an endless or huge file are refused for what they are, before parsing (a directory
// read as empty said "source: missing required key"; /dev/zero was read until memory ran out).
TEST(ConfigLoader, ADirectoryOrAHugeFileIsNotAConfig) {
  const auto message = [](const std::string& path) -> std::string {
    try {
      (void)load_config(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  const testing::TempDir dir("ferry_config_files");
  EXPECT_NE(message(dir.path()).find(dir.path() + ": is a directory, not a config file"), std::string::npos)
      << message(dir.path());
  EXPECT_NE(message("/dev/zero").find("/dev/zero: is a character device, not a config file"), std::string::npos)
      << message("/dev/zero");
  const std::string big = dir / "big.yaml";
  {
    std::ofstream out(big);
    out << "batch_size: 4\n";
    const std::string comment = "# " + std::string(1022, 'x') + "\n";
    for (int i = 0; i < 16 * 1024; ++i) out << comment;
  }
  EXPECT_NE(message(big).find("more than 16 MiB"), std::string::npos) << message(big);
}

// ---- image sources and the jpeg decoder's resize and crop ------------------------------------------

TEST(ConfigLoader, ReadsAnImageFolderWithItsImageKeys) {
  const ImageRoot root;
  const Config config =
      parse_config("source:\n  kind: image_folder\n  root: " + root.path() +
                       "\n  extensions: [JPG, .png]\n"
                       "  image: {decoder: image, shape: [224, 224, 3], resize_shorter: 256, crop: random}\n",
                   "images.yaml");
  EXPECT_EQ(config.source.kind, "image_folder");
  const ImageFolderOptions folder = image_folder_options(config.source.keys);
  EXPECT_EQ(folder.root, root.path());
  EXPECT_EQ(folder.extensions, (std::vector<std::string>{"JPG", "png"}));
  EXPECT_EQ(folder.image.name, "image");
  EXPECT_EQ(folder.image.decoder, "image");
  EXPECT_EQ(folder.image.shape, (std::vector<int64_t>{224, 224, 3}));
  const FieldDecoders decoders = make_field_decoders(config, *make_source(config.source));
  const auto* image = dynamic_cast<const ImageDecoder*>(decoders.at("image").get());
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(image->options().resize_shorter, 256);
  EXPECT_EQ(image->options().crop, ImageDecodeOptions::Crop::kRandom);
  EXPECT_EQ(config.where("source.image.shape"), "images.yaml:5:34");

  // The extensions default to jpg and jpeg; decoder raw needs no shape and decodes as raw does.
  const Config raw =
      parse_config("source: {kind: image_folder, root: " + root.path() + ", image: {decoder: raw}}\n", "raw.yaml");
  EXPECT_EQ(image_folder_options(raw.source.keys).extensions, (std::vector<std::string>{"jpg", "jpeg"}));
  EXPECT_EQ(image_folder_options(raw.source.keys).image.decoder, "raw");
  EXPECT_TRUE(image_folder_options(raw.source.keys).image.variable());
  EXPECT_EQ(make_field_decoders(raw, *make_source(raw.source)).at("image")->name(), "raw");
  // Without resize_shorter and crop a jpeg image is not cropped: every image must already be [H, W].
  const Config plain = parse_config(
      "source: {kind: image_folder, root: " + root.path() + ", image: {shape: [8, 8, 3]}}\n", "plain.yaml");
  const auto* jpeg =
      dynamic_cast<const JpegDecoder*>(make_field_decoders(plain, *make_source(plain.source)).at("image").get());
  ASSERT_NE(jpeg, nullptr);
  EXPECT_EQ(jpeg->options().crop_height, 0);
  EXPECT_EQ(jpeg->options().resize_shorter, 0);
}

TEST(ConfigLoader, ReadsResizeAndCropOfTarMembers) {
  const Config config = parse_config(R"(
source:
  kind: tar
  shards: )" + a_shard() + R"(
  members:
    - {name: image, extension: jpg, decoder: jpeg, shape: [32, 48, 3], crop: center}
    - {name: big, extension: png, decoder: png, shape: [64, 64, 3], resize_shorter: 80}
    - {name: label, extension: cls, decoder: label, dtype: int64, shape: []}
)",
                                     "tar.yaml");
  const std::vector<DecodedField> fields = SourceRegistry::global().find("tar")->decoded_fields(config.source.keys);
  ASSERT_EQ(fields.size(), 3u);
  const auto decoder_of = [&](size_t i, std::vector<int64_t> shape) {
    const FieldSpec spec{fields[i].name, at::kByte, std::move(shape)};
    return DecoderRegistry::global().make(fields[i].keys->text_or("decoder", "raw"),
                                          DecoderArgs{spec, *fields[i].keys, 0});
  };
  const auto image = decoder_of(0, {32, 48, 3});
  const auto* jpeg = dynamic_cast<const JpegDecoder*>(image.get());
  ASSERT_NE(jpeg, nullptr);
  EXPECT_EQ(jpeg->options().resize_shorter, 0);
  EXPECT_EQ(jpeg->options().crop, ImageDecodeOptions::Crop::kCenter);
  EXPECT_EQ(jpeg->options().crop_height, 32);
  EXPECT_EQ(jpeg->options().crop_width, 48);
  const auto big = decoder_of(1, {64, 64, 3});
  const auto* png = dynamic_cast<const PngDecoder*>(big.get());
  ASSERT_NE(png, nullptr);
  EXPECT_EQ(png->options().resize_shorter, 80);
  EXPECT_EQ(png->options().crop, ImageDecodeOptions::Crop::kCenter);
  EXPECT_EQ(decoder_of(2, {})->name(), "label");
}

// The problems a config has, one line each ("test.yaml:5:7: key: message"), without the header.
std::vector<std::string> problem_lines(const std::string& yaml) {
  std::vector<std::string> lines;
  const std::string text = problems_of(yaml);
  for (size_t at = text.find("\n  "); at != std::string::npos;) {
    const size_t next = text.find("\n  ", at + 3);
    lines.push_back(text.substr(at + 3, next == std::string::npos ? std::string::npos : next - at - 3));
    at = next;
  }
  return lines;
}

TEST(ConfigLoader, ResizeAndCropAreRefusedWhereTheJpegDecoderCannotApplyThem) {
  const ImageRoot root;
  const std::string folder = "source:\n  kind: image_folder\n  root: " + root.path() + "\n";
  const std::string shard = root.path() + "/cat/0.jpg";  // a file: only the key is wrong
  const std::string tar = "source:\n  kind: tar\n  shards: " + a_shard() + "\n  members:\n";
  const std::string only_jpeg = " is a key of the decoders jpeg, png, webp, image; this field's decoder is ";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases{
      {tar + "    - {name: image, extension: jpg, shape: [8, 8, 3], crop: random}\n",
       {"test.yaml:5:61: source.members[0].crop: crop" + only_jpeg + "'raw' (set decoder: jpeg, or remove crop)"}},
      {tar + "    - {name: image, extension: jpg, decoder: npy, resize_shorter: 9, crop: center}\n",
       {"test.yaml:5:67: source.members[0].resize_shorter: resize_shorter" + only_jpeg +
            "'npy' (set decoder: jpeg, or remove resize_shorter)",
        "test.yaml:5:76: source.members[0].crop: crop" + only_jpeg + "'npy' (set decoder: jpeg, or remove crop)"}},
      {tar + "    - {name: image, extension: jpg, decoder: jpeg, resize_shorter: 9}\n",
       {"test.yaml:5:7: source.members[0].shape: missing required key: the jpeg decoder makes images of a fixed "
        "[H, W, 3], e.g. [224, 224, 3], or of their own size, [null, null, 3]"}},
      {tar + "    - {name: image, extension: jpg, decoder: jpeg, shape: [8, 8], resize_shorter: 9}\n",
       {"test.yaml:5:59: source.members[0].shape: the jpeg decoder makes [H, W, 3] images (H, W >= 1, or both null "
        "for images of their own size), found [8, 8]"}},
      {tar + "    - {name: image, extension: jpg, decoder: jpeg, dtype: float32, shape: [8, 8, 3]}\n",
       {"test.yaml:5:59: source.members[0].dtype: the jpeg decoder makes uint8 images, found float32"}},
      {folder + "  image: {shape: [8, 8, 3], resize_shorter: 0}\n",
       {"test.yaml:4:45: source.image.resize_shorter: expected an integer in 1..65535 (pixels), found '0'"}},
      {folder + "  image: {shape: [8, 8, 3], crop: middle}\n",
       {"test.yaml:4:35: source.image.crop: expected one of center, random, random_resized, found 'middle'"}},
      {folder + "  image: {decoder: raw, crop: random}\n",
       {"test.yaml:4:31: source.image.crop: crop" + only_jpeg + "'raw' (set decoder: jpeg, or remove crop)"}},
      {folder + "  image: {resize_shorter: 9}\n",
       {"test.yaml:4:10: source.image.shape: missing required key: the jpeg decoder makes images of a fixed [H, W, 3], "
        "e.g. [224, 224, 3], or of their own size, [null, null, 3]"}},
      {folder + "  image: {shape: [8, 8, 3], crop: center}\ndecode: {decoders: {image: raw}}\n",
       {"test.yaml:5:28: decode.decoders.image: field 'image' sets crop, which only the decoders jpeg, png, webp, "
        "image "
        "take; this names 'raw'"}},
      // A decoder of one format over files of the other fails on every sample: refused at once.
      {folder + "  extensions: [jpg, PNG]\n  image: {shape: [8, 8, 3]}\n",
       {"test.yaml:5:10: source.image.decoder: the jpeg decoder cannot read .PNG files; use decoder: png, or "
        "decoder: image, which reads JPEG, PNG and WebP files alike"}},
      {"source:\n  kind: tar\n  shards: " + a_shard() +
           "\n  members:\n"
           "    - {name: image, extension: jpeg, decoder: png, shape: [8, 8, 3]}\n",
       {"test.yaml:5:47: source.members[0].decoder: the png decoder cannot read .jpeg files; use decoder: jpeg, or "
        "decoder: image, which reads JPEG, PNG and WebP files alike"}},
  };
  for (const auto& [yaml, expected] : cases) {
    SCOPED_TRACE(yaml);
    EXPECT_EQ(problem_lines(yaml), expected);
  }
}

TEST(ConfigLoader, AMissingDatasetIsNamedByItsAbsolutePathWithTheCommandThatMakesOne) {
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  const std::string here(cwd);
  const std::vector<std::pair<std::string, std::string>> cases{
      {"source: {kind: megatron, prefix: ./no-data/tokens}\n",
       "test.yaml:1:34: source.prefix: no such dataset: " + here +
           "/no-data/tokens (./no-data/tokens from the current folder; relative paths are not the config's) "
           "(neither its .idx nor its .bin exists); `ferry make-dataset tokens ./no-data/tokens` writes a small one "
           "there to try ferry on"},
      {"source:\n  kind: tar\n  shards: \"no-data/shard-{000000..000003}.tar\"\n",
       "test.yaml:3:11: source.shards: no such file: " + here +
           "/no-data/shard-{000000..000003}.tar (no-data/shard-{000000..000003}.tar from the current folder; "
           "relative paths are not the config's) (none of its 4 shards exists); `ferry make-dataset tar no-data` "
           "writes a small one there to try ferry on"},
      // Names make-dataset does not write get no command: it would make files still not found.
      {"source:\n  kind: tar\n  shards: \"no-data/train-{0..1}.tar\"\n",
       "test.yaml:3:11: source.shards: no such file: " + here +
           "/no-data/train-{0..1}.tar (no-data/train-{0..1}.tar from the current folder; relative paths are not the "
           "config's) (none of its 2 shards exists)"},
      {"source: {kind: tar, shards: shard-000000.tar}\n",
       "test.yaml:1:29: source.shards: no such file: " + here +
           "/shard-000000.tar (shard-000000.tar from the current folder; relative paths are not the config's)"},
      {"source:\n  kind: tar\n  shards: \"no-data/shard-{000000..000001}.tar\"\n",
       "test.yaml:3:11: source.shards: no such file: " + here +
           "/no-data/shard-{000000..000001}.tar (no-data/shard-{000000..000001}.tar from the current folder; "
           "relative paths are not the config's) (none of its 2 shards exists); `ferry make-dataset tar no-data "
           "--shards 2` writes a small one there to try ferry on"},
      {"source: {kind: image_folder, root: no-data/images, image: {shape: [8, 8, 3]}}\n",
       "test.yaml:1:36: source.root: no such folder: " + here +
           "/no-data/images (no-data/images from the current folder; relative paths are not the config's); `ferry "
           "make-dataset images no-data/images` writes a small one there to try ferry on"},
  };
  for (const auto& [yaml, expected] : cases) {
    SCOPED_TRACE(yaml);
    EXPECT_EQ(problem_lines(yaml), std::vector<std::string>{expected});
  }
}

TEST(ConfigLoader, ImageFolderKeysBelongToImageFolderAndItsRootMustExist) {
  const ImageRoot root;
  const std::string folder = "source:\n  kind: image_folder\n  root: " + root.path() + "\n";
  const std::string shard = root.path() + "/cat/0.jpg";  // a file: only the key is wrong
  const std::vector<std::pair<std::string, std::string>> cases{
      {"source:\n  kind: image_folder\n  image: {shape: [8, 8, 3]}\n",
       "test.yaml:2:3: source.root: missing required key (the folder holding one sub-folder per class)"},
      {"source:\n  kind: image_folder\n  root: /nonexistent-ferry-data/images\n  image: {shape: [8, 8, 3]}\n",
       "test.yaml:3:9: source.root: no such folder: /nonexistent-ferry-data/images; `ferry make-dataset images "
       "/nonexistent-ferry-data/images` writes a small one there to try ferry on"},
      {"source:\n  kind: image_folder\n  root: /dev/null\n  image: {shape: [8, 8, 3]}\n",
       "test.yaml:3:9: source.root: not a folder: /dev/null"},
      {folder,
       "test.yaml:2:3: source.image: missing required key (how the images decode, e.g. image: {shape: [224, 224, 3]})"},
      {folder + "  image: {shape: [8, 8, 3]}\n  extensions: []\n",
       "test.yaml:5:15: source.extensions: expected a non-empty list of file extensions, e.g. [jpg, jpeg], found a "
       "list []"},
      {folder + "  image: {shape: [8, 8, 3], size: 3}\n",
       "test.yaml:4:29: source.image.size: unknown key; known in source.image: shape, max_pixels, decoder, "
       "resize_shorter, crop, scale, ratio, flip, interpolation, antialias, window, dct_scaling, device"},
      {folder + "  image: {shape: [8, 8, 3]}\n  members: [{name: x, extension: jpg}]\n",
       "test.yaml:5:3: source.members: not a key of source kind 'image_folder' (its keys: kind, root, extensions, "
       "image)"},
      {"source:\n  kind: tar\n  shards: " + shard + "\n  root: " + root.path() + "\n",
       "test.yaml:4:3: source.root: not a key of source kind 'tar' (its keys: kind, shards, members)"},
  };
  for (const auto& [yaml, expected] : cases) {
    SCOPED_TRACE(yaml);
    EXPECT_EQ(problem_lines(yaml), std::vector<std::string>{expected});
  }
}

TEST(ConfigLoader, EachJpegFieldGetsADecoderOfItsOwnSeededFromTheSampler) {
  const ImageRoot root;
  const std::vector<std::string> registered = DecoderRegistry::global().names();
  const std::string yaml = "source: {kind: image_folder, root: " + root.path() +
                           ", image: {shape: [6, 10, 3], resize_shorter: 12, crop: random}}\nsampler: {seed: 99}\n";
  const Config config = parse_config(yaml, "a.yaml");
  const Config other = parse_config(yaml, "b.yaml", {"source.image.resize_shorter=20", "sampler.seed=5"});
  const auto source = make_source(config.source);
  const FieldDecoders decoders = make_field_decoders(config, *source);
  const FieldDecoders other_decoders = make_field_decoders(other, *source);
  ASSERT_EQ(decoders.size(), 1u);
  const auto* jpeg = dynamic_cast<const JpegDecoder*>(decoders.at("image").get());
  ASSERT_NE(jpeg, nullptr);
  EXPECT_EQ(jpeg->name(), "jpeg");
  EXPECT_EQ(jpeg->options().resize_shorter, 12);
  EXPECT_EQ(jpeg->options().crop_height, 6);
  EXPECT_EQ(jpeg->options().crop_width, 10);
  EXPECT_EQ(jpeg->options().crop, JpegDecodeOptions::Crop::kRandom);
  EXPECT_EQ(jpeg->options().seed, 99u);
  const auto* other_jpeg = dynamic_cast<const JpegDecoder*>(other_decoders.at("image").get());
  ASSERT_NE(other_jpeg, nullptr);
  EXPECT_EQ(other_jpeg->options().resize_shorter, 20);
  EXPECT_EQ(other_jpeg->options().seed, 5u);
  EXPECT_EQ(DecoderRegistry::global().names(), registered) << "a config registered a decoder globally";
}

// ---- docs/config.md and the schema describe the same keys -----------------------------------------

struct DocumentedKey {
  std::string path, type, default_value;
};

// Where docs/config.md's reference of the source kinds, decoders and transforms starts: from there on
// it is what `ferry info --keys` prints, made from the registries.
constexpr const char* kGeneratedReference = "<!-- generated by `ferry info --keys`";

std::string config_doc() {
  std::ifstream doc(FERRY_CONFIG_DOC);
  EXPECT_TRUE(doc) << FERRY_CONFIG_DOC;
  std::ostringstream text;
  text << doc.rdbuf();
  return text.str();
}

// Rows of docs/config.md's key tables before the generated reference: | `path` | type | default | ... |
std::vector<DocumentedKey> documented_keys() {
  std::string doc = config_doc();
  doc = doc.substr(0, doc.find(kGeneratedReference));
  std::istringstream lines(doc);
  const std::regex row(R"(^\| `([^`]+)` \| ([^|]*) \| ([^|]*) \|.*)");
  std::vector<DocumentedKey> keys;
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (std::regex_match(line, match, row)) {
      auto trim = [](std::string text) {
        text.erase(0, text.find_first_not_of(' '));
        text.erase(text.find_last_not_of(' ') + 1);
        return text;
      };
      keys.push_back({match[1], trim(match[2]), trim(match[3])});
    }
  }
  return keys;
}

TEST(ConfigDocs, TheReferenceOfTheExtensionsIsTheRegistriesOwn) {
  const std::string doc = config_doc();
  const size_t at = doc.find(kGeneratedReference);
  ASSERT_NE(at, std::string::npos) << "docs/config.md has no generated reference of the extensions";
  EXPECT_NE(doc.find(extension_keys_markdown(), at), std::string::npos)
      << "docs/config.md's reference of source kinds, decoders and transforms is not what `ferry info --keys` "
         "prints now; paste its output there:\n"
      << extension_keys_markdown();
}

TEST(ConfigDocs, EveryKeyIsDocumentedWithItsTypeAndDefault) {
  const std::vector<DocumentedKey> documented = documented_keys();
  std::set<std::string> documented_paths;
  for (const DocumentedKey& key : documented) documented_paths.insert(key.path);
  for (const ConfigKey& key : config_keys()) {
    SCOPED_TRACE(std::string(key.path));
    const auto found =
        std::find_if(documented.begin(), documented.end(), [&](const DocumentedKey& d) { return d.path == key.path; });
    ASSERT_NE(found, documented.end()) << "docs/config.md does not document " << key.path;
    EXPECT_EQ(found->type, key.type);
    EXPECT_EQ(found->default_value, key.default_value);
  }
  EXPECT_EQ(documented.size(), documented_paths.size()) << "a key is documented twice";
}

// A temporary folder holding data/tokens.{bin,idx}, data/shard-000.tar and data/images/<class>/,
// made the working directory while it lives, so that the documented examples name real datasets.
class TokenDatasetFolder {
 public:
  TokenDatasetFolder() {
    char pattern[] = "/tmp/ferry_config_docs_XXXXXX";
    folder_ = ::mkdtemp(pattern);
    ::mkdir((folder_ + "/data").c_str(), 0755);
    IndexedDatasetWriter writer(folder_ + "/data/tokens", IndexedDtype::kInt32);
    std::vector<int64_t> tokens(50000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i % 1000);
    writer.add_document(tokens);
    writer.finalize();
    TarWriter tar;
    tar.add("000000.jpg", "not really a jpeg");
    tar.add("000000.cls", "3\n");
    TarWriter::write_file(folder_ + "/data/shard-000.tar", tar.finish());
    ::mkdir((folder_ + "/data/images").c_str(), 0755);
    ::mkdir((folder_ + "/data/images/cat").c_str(), 0755);
    std::ofstream(folder_ + "/data/images/cat/0.jpg") << "not really a jpeg";
    std::ofstream(folder_ + "/data/text.jsonl") << "{\"text\": \"the cat sat on the mat\"}\n";
    std::ifstream model(FERRY_SENTENCEPIECE_TEST_MODEL, std::ios::binary);
    std::ofstream(folder_ + "/tokenizer.model", std::ios::binary) << model.rdbuf();
    char previous[4096];
    previous_ = ::getcwd(previous, sizeof previous) != nullptr ? previous : "/";
    EXPECT_EQ(::chdir(folder_.c_str()), 0);
  }
  ~TokenDatasetFolder() {
    // POSIX calls: std::filesystem crashed a test built with g++ 13 against a libtorch of another libstdc++.
    if (::chdir(previous_.c_str()) != 0) ADD_FAILURE() << "cannot return to " << previous_;
    for (const char* file : {"/data/tokens.bin", "/data/tokens.idx", "/data/shard-000.tar", "/data/images/cat/0.jpg",
                             "/data/text.jsonl", "/tokenizer.model"}) {
      ::unlink((folder_ + file).c_str());
    }
    ::rmdir((folder_ + "/data/images/cat").c_str());
    ::rmdir((folder_ + "/data/images").c_str());
    ::rmdir((folder_ + "/data").c_str());
    ::rmdir(folder_.c_str());
  }

 private:
  std::string folder_;
  std::string previous_;
};

TEST(ConfigDocs, EveryDocumentedKeyIsAcceptedWithItsExample) {
  const TokenDatasetFolder dataset;
  const std::string megatron = "source: {kind: megatron, prefix: data/tokens}\n";
  const std::string tar =
      "source: {kind: tar, shards: [data/shard-000.tar], members: [{name: image, extension: jpg, decoder: jpeg, shape: "
      "[8, 8, 3]}]}\nsampler: {shuffle: true}\n";
  const std::string image_folder = "source: {kind: image_folder, root: data/images, image: {shape: [8, 8, 3]}}\n";
  for (const DocumentedKey& documented : documented_keys()) {
    SCOPED_TRACE(documented.path);
    // A plugin and a transform are tried where they can be: the plugin tests, the transforms' keys below.
    if (documented.path == "plugins" || documented.path == "transforms[].kind") continue;
    const ConfigKey* key = find_config_key(documented.path);
    ASSERT_NE(key, nullptr) << "docs/config.md documents a key the loader does not know: " << documented.path;
    // The path as --set takes it: a list element is index 0, a <field> is the variable-length one.
    std::string path(key->path);
    for (size_t at; (at = path.find("[]")) != std::string::npos;) path.replace(at, 2, ".0");
    for (size_t at; (at = path.find("<field>")) != std::string::npos;) path.replace(at, 7, "tokens");
    const std::string set = path + "=" + std::string(key->example);
    // A key of one source kind is tried on a config of that kind.
    const auto for_kind = [&](std::string_view kind) {
      return std::string_view(key->default_value).find(kind) != std::string_view::npos ||
             std::string_view(key->description).find(kind) != std::string_view::npos;
    };
    const std::string& base = for_kind("(megatron)")       ? megatron
                              : for_kind("(tar)")          ? tar
                              : for_kind("(image_folder)") ? image_folder
                                                           : kMinimal;
    EXPECT_EQ(problems_of(base, {set}), "") << "--set " << set;
  }
}

// Each key of a registered extension's, --set with its example on a config that uses the extension.
std::vector<std::pair<std::string, std::string>> key_examples(const std::vector<KeySpec>& keys,
                                                              const std::string& prefix) {
  std::vector<std::pair<std::string, std::string>> examples;
  for (const KeySpec& key : keys) {
    const std::string path = prefix + key.name;
    examples.emplace_back(path, key.example);
    if (key.type == KeySpec::Type::kMapping) {
      for (auto& example : key_examples(key.keys, path + ".")) examples.push_back(std::move(example));
    }
    if (key.type == KeySpec::Type::kList && key.item.front().type == KeySpec::Type::kMapping) {
      for (auto& example : key_examples(key.item.front().keys, path + ".0.")) examples.push_back(std::move(example));
    }
  }
  return examples;
}

TEST(ConfigDocs, EveryKeyOfTheBuiltInExtensionsIsAcceptedWithItsExample) {
  const TokenDatasetFolder dataset;
  const std::map<std::string, std::string> bases{
      {"synthetic", kMinimal},
      {"megatron", "source: {kind: megatron, prefix: data/tokens}\n"},
      {"tokens", "source: {kind: tokens, path: data/tokens.bin}\n"},
      {"jsonl", "source: {kind: jsonl, files: [data/text.jsonl], fields: [{name: text, max_length: 64}]}\n"},
      {"mix", "source: {mix: [{weight: 1, source: {kind: megatron, prefix: data/tokens}}]}\n"},
      {"tar",
       "source: {kind: tar, shards: [data/shard-000.tar], members: [{name: image, extension: jpg, shape: [8, 8, "
       "3]}]}\n"},
      {"image_folder", "source: {kind: image_folder, root: data/images, image: {shape: [8, 8, 3]}}\n"},
      {"python",
       "source: {kind: python, dataset: my_data.datasets:make_train, fields: [{name: image, dtype: uint8}]}\n"},
  };
  for (const auto& kind : SourceRegistry::global().kinds()) {
    ASSERT_EQ(bases.count(kind->name), 1u) << "no config to try source kind " << kind->name << " on";
    for (const auto& [path, example] : key_examples(kind->keys, "source.")) {
      const std::string set = path + "=" + example;
      // max_pixels bounds images of their own size.
      std::vector<std::string> sets = {set};
      if (path.ends_with(".max_pixels")) sets.push_back(path.substr(0, path.size() - 10) + "shape=[null, null, 3]");
      // samples counts random windows.
      if (path == "source.samples" && (kind->name == "megatron" || kind->name == "tokens")) {
        sets.push_back("source.windows=random");
      }
      // A token file's documents end at eod_token.
      if ((path == "source.document_ids" || path == "source.position_ids") && kind->name == "tokens") {
        sets.push_back("source.eod_token=50256");
      }
      // The check loads the sentencepiece model: skipped where the module cannot load (Note [sentencepiece module]).
      if (example.find("sentencepiece") != std::string::npos && SentencePieceModel::unavailable()) continue;
      EXPECT_EQ(problems_of(bases.at(kind->name), sets), "") << "--set " << set;
    }
  }
  for (const auto& decoder : DecoderRegistry::global().kinds()) {
    if (decoder->name == "sentencepiece" && SentencePieceModel::unavailable()) continue;
    const std::string field =
        decoder->name == "sentencepiece"
            ? "{name: text, extension: txt, decoder: sentencepiece, model: tokenizer.model, "
              "dtype: int64, shape: [8]}"
            : "{name: image, extension: " +
                  std::string(decoder->name == "png" || decoder->name == "webp" ? decoder->name : "jpg") +
                  ", decoder: " + decoder->name + ", shape: [8, 8, 3]}";
    const std::string base = "source: {kind: tar, shards: [data/shard-000.tar], members: [" + field + "]}\n";
    for (const auto& [path, example] : key_examples(decoder->keys, "source.members.0.")) {
      const std::string set = path + "=" + example;
      // The random-resized crop's ranges go with that crop.
      const bool resized_crop = path.ends_with(".scale") || path.ends_with(".ratio");
      std::vector<std::string> sets = {set};
      if (resized_crop) sets.push_back("source.members.0.crop=random_resized");
      EXPECT_EQ(problems_of(base, sets), "") << "--set " << set;
    }
  }
  for (const auto& transform : TransformRegistry::global().kinds()) {
    // Each key as its example, a list of fields (the python transform's) as the list's own example.
    std::string entry = "{kind: " + transform->name;
    for (const KeySpec& key : transform->keys) entry += ", " + key.name + ": " + key.example;
    const std::string yaml = std::string(kMinimal) + "transforms: [" + entry + "}]\n";
    EXPECT_EQ(problems_of(yaml), "") << yaml;
  }
}

}  // namespace
}  // namespace ferry
