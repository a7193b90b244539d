#include "io/config_loader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "io/config_schema.h"
#include "io/indexed_dataset_writer.h"
#include "tests/support/tar_writer.h"
#include "io/units.h"

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
  ASSERT_EQ(config.source.synthetic.fields.size(), 2u);
  EXPECT_EQ(config.source.synthetic.samples, 1024u);
  const SyntheticField& tokens = config.source.synthetic.fields[1];
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
  const SyntheticOptions& source = config.source.synthetic;
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
  const Config config = parse_config(kMinimal, "test.yaml",
                                     {"pool.slab_size=1.5MiB", "sampler.shuffle=true", "transfer.device=cpu",
                                      "source.fields.0.shape=[4, 4]", "source.fields[1].length=[2, 3]",
                                      "collate.pad_values={tokens: -7}", "batch_size=3"});
  EXPECT_EQ(config.pipeline.pool.slab_bytes, size_t{3} << 19);
  EXPECT_TRUE(config.sampler.shuffle);
  EXPECT_EQ(config.pipeline.device, "cpu");
  EXPECT_EQ(config.source.synthetic.fields[0].shape, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(config.source.synthetic.fields[1].max_length, 3);
  EXPECT_EQ(config.pipeline.collate.pad_values.at("tokens"), -7);
  EXPECT_EQ(config.pipeline.batch_size, 3u);
  EXPECT_EQ(config.where("pool.slab_size"), "--set pool.slab_size=1.5MiB");
  EXPECT_EQ(config.where("source.fields[0].shape"), "--set source.fields.0.shape=[4, 4]");
  EXPECT_EQ(config.where("source.fields[0].dtype"), "test.yaml:5:28");
}

TEST(ConfigOverrides, AppendToAListAndReplaceAWholeSection) {
  const Config appended = parse_config(kMinimal, "test.yaml", {"source.fields.2={name: label, dtype: int64}"});
  ASSERT_EQ(appended.source.synthetic.fields.size(), 3u);
  EXPECT_EQ(appended.source.synthetic.fields[2].name, "label");
  const Config replaced = parse_config(kMinimal, "test.yaml", {"source={kind: synthetic, samples: 5, fields: [{name: x, dtype: float32}]}"});
  ASSERT_EQ(replaced.source.synthetic.fields.size(), 1u);
  EXPECT_EQ(replaced.source.synthetic.samples, 5u);
}

TEST(ConfigOverrides, BadOverridesAreReportedAtTheirFlag) {
  EXPECT_NE(problems_of(kMinimal, {"batch_size"}).find("--set batch_size: expected key.path=value"), std::string::npos);
  EXPECT_NE(problems_of(kMinimal, {"source.fields.5.name=x"}).find("--set source.fields.5.name=x: source.fields: '5' is not an index"),
            std::string::npos);
  EXPECT_NE(problems_of(kMinimal, {"source.kind.x=1"}).find("--set source.kind.x=1: source.kind.x: cannot set a key inside 'synthetic'"),
            std::string::npos);
  EXPECT_NE(problems_of(kMinimal, {"prefetch=[1"}).find("--set prefetch=[1: prefetch: invalid YAML value"), std::string::npos);
  EXPECT_NE(problems_of(kMinimal, {"batch_size.=7"}).find("--set batch_size.=7: batch_size.: expected key.path=value with non-empty key names"),
            std::string::npos);
  // A field appended by --set is located there, down to the keys it lacks.
  EXPECT_NE(problems_of(kMinimal, {"source.fields.2.name=y"}).find("--set source.fields.2.name=y: source.fields[2].dtype: missing required key"),
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
    EXPECT_NE(std::string(e.what()).find("sampler.world_size is 1 but torchrun's WORLD_SIZE is 8: set sampler.rank as well"),
              std::string::npos)
        << e.what();
  }
  whole.rank = 0;
  EXPECT_EQ(resolve_placement(whole, env).rank, 0u);
  EXPECT_EQ(resolve_placement(SamplerConfig{}, std::nullopt).world_size, 1u);
}

TEST(ConfigLoader, AnEmptyFileNamesTheMissingSource) {
  EXPECT_NE(problems_of("").find("source: missing required key"), std::string::npos);
  EXPECT_NE(problems_of("# just a comment\n").find("source: missing required key"), std::string::npos);
}

TEST(ConfigLoader, AMissingFileSaysSo) {
  try {
    (void)load_config("/nonexistent/ferry.yaml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/ferry.yaml: cannot open the config file: No such file"), std::string::npos)
        << e.what();
  }
}

// ---- docs/config.md and the schema describe the same keys -----------------------------------------

struct DocumentedKey {
  std::string path, type, default_value;
};

// Rows of docs/config.md's key tables: | `path` | type | default | description | `example` |
std::vector<DocumentedKey> documented_keys() {
  std::ifstream doc(FERRY_CONFIG_DOC);
  EXPECT_TRUE(doc) << FERRY_CONFIG_DOC;
  const std::regex row(R"(^\| `([^`]+)` \| ([^|]*) \| ([^|]*) \|.*)");
  std::vector<DocumentedKey> keys;
  for (std::string line; std::getline(doc, line);) {
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

TEST(ConfigDocs, EveryKeyIsDocumentedWithItsTypeAndDefault) {
  const std::vector<DocumentedKey> documented = documented_keys();
  std::set<std::string> documented_paths;
  for (const DocumentedKey& key : documented) documented_paths.insert(key.path);
  for (const ConfigKey& key : config_keys()) {
    SCOPED_TRACE(std::string(key.path));
    const auto found = std::find_if(documented.begin(), documented.end(),
                                    [&](const DocumentedKey& d) { return d.path == key.path; });
    ASSERT_NE(found, documented.end()) << "docs/config.md does not document " << key.path;
    EXPECT_EQ(found->type, key.type);
    EXPECT_EQ(found->default_value, key.default_value);
  }
  EXPECT_EQ(documented.size(), documented_paths.size()) << "a key is documented twice";
}

// A temporary folder holding data/tokens.{bin,idx} and data/shard-000.tar, made the working
// directory while it lives, so that the documented examples name real datasets.
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
    testing::TarWriter tar;
    tar.add("000000.jpg", "not really a jpeg");
    tar.add("000000.cls", "3\n");
    testing::TarWriter::write_file(folder_ + "/data/shard-000.tar", tar.finish());
    char previous[4096];
    previous_ = ::getcwd(previous, sizeof previous) != nullptr ? previous : "/";
    EXPECT_EQ(::chdir(folder_.c_str()), 0);
  }
  ~TokenDatasetFolder() {
    // POSIX calls: std::filesystem crashed a test on the GPU machine's toolchain (see cli_test).
    if (::chdir(previous_.c_str()) != 0) ADD_FAILURE() << "cannot return to " << previous_;
    for (const char* file : {"/data/tokens.bin", "/data/tokens.idx", "/data/shard-000.tar"}) ::unlink((folder_ + file).c_str());
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
  const std::string tar = "source: {kind: tar, shards: [data/shard-000.tar], members: [{name: image, extension: jpg}]}\n";
  for (const DocumentedKey& documented : documented_keys()) {
    SCOPED_TRACE(documented.path);
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
    const std::string& base = for_kind("(megatron)") ? megatron : for_kind("(tar)") ? tar : kMinimal;
    EXPECT_EQ(problems_of(base, {set}), "") << "--set " << set;
  }
}

}  // namespace
}  // namespace ferry
