// Plugins: examples/plugin (a csv source kind, the text_numbers decoder, the split_label transform) loaded
// at run time, in this process and by the command, with every value checked; and plugins that are wrong
// in every way the loader knows, each refused with its reason and nothing of it registered.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/assembly/plugin.h>
#include <ferry/build_config.h>
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

const std::string kPlugin = FERRY_EXAMPLE_PLUGIN;
std::string bad_plugin(const std::string& name) { return std::string(FERRY_BAD_PLUGINS) + "/lib" + name + ".so"; }

// A CSV file of `rows` records of 5 numbers (the fifth a class, 0..2), with their values as floats.
struct Records {
  std::string path;
  std::vector<std::vector<float>> rows;
};

Records write_records(const std::string& folder, size_t rows, uint64_t seed, const std::string& bad_line = "") {
  Records records{folder + "/records.csv", {}};
  std::ofstream out(records.path);
  out << "a,b,c,d,class\n";
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<float> number(-100, 100);
  for (size_t r = 0; r < rows; ++r) {
    if (r == 5 && !bad_line.empty()) {
      out << bad_line << "\n";
      records.rows.push_back({});
      continue;
    }
    std::vector<float> row;
    std::ostringstream line;
    line.precision(9);  // every float exactly
    for (int c = 0; c < 4; ++c) {
      row.push_back(number(random));
      line << row.back() << ",";
    }
    row.push_back(static_cast<float>(r % 3));
    line << r % 3;
    out << line.str() << (r % 7 == 0 ? "\r\n" : "\n");
    if (r % 11 == 0) out << "\n# a comment between records\n";
    records.rows.push_back(std::move(row));
  }
  return records;
}

std::string config_text(const Records& records, const std::string& extra = "") {
  return "plugins: [" + kPlugin + "]\nsource: {kind: csv, path: " + records.path +
         ", columns: 5, header: true}\ntransforms: [{kind: split_label, label: 4}]\nbatch_size: 7\n"
         "sampler: {shuffle: true, seed: 5, epochs: 2}\ntransfer: {device: cpu}\n" +
         extra;
}

// Every value of every batch against the records, for the split_label transform without jitter.
void expect_records(Pipeline& pipeline, const Records& records, uint64_t samples) {
  uint64_t seen = 0;
  for (const Batch& batch : pipeline) {
    ASSERT_EQ(batch.names(), (std::vector<std::string>{"features", "label"}));
    for (size_t row = 0; row < batch.batch_size(); ++row) {
      const std::vector<float>& expected = records.rows.at(batch.sample_indices()[row]);
      const at::Tensor features = batch["features"][static_cast<int64_t>(row)];
      for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(features[c].item<float>(), expected[c]);
      EXPECT_EQ(batch["label"][static_cast<int64_t>(row)].item<int64_t>(), static_cast<int64_t>(expected[4]));
      ++seen;
    }
  }
  EXPECT_EQ(seen, samples);
}

TEST(Plugins, AFoundPluginAddsItsSourceDecoderAndTransformAndTheirValuesArrive) {
  const testing::TempDir dir("ferry_plugin");
  const Records records = write_records(dir.path(), 53, 1);
  for (const size_t threads : {1, 2, 4, 8}) {
    SCOPED_TRACE(threads);
    const Config config =
        parse_config(config_text(records), "records.yaml", {"decode.threads=" + std::to_string(threads)});
    EXPECT_EQ(config.plugins, std::vector<std::string>{kPlugin});
    Pipeline pipeline = make_pipeline(config);
    expect_records(pipeline, records, 2 * 53);
  }
  // Loaded once, whatever names it again.
  load_plugin(kPlugin);
  EXPECT_EQ(loaded_plugins().size(), 1u);
  EXPECT_EQ(SourceRegistry::global().find("csv")->origin, loaded_plugins().front());
}

TEST(Plugins, APluginsKeysAreCheckedLikeBuiltInOnes) {
  const testing::TempDir dir("ferry_plugin");
  const Records records = write_records(dir.path(), 10, 2);
  const std::vector<std::pair<std::string, std::string>> cases{
      {"source.colums=5", "--set source.colums=5: source.colums: unknown key (did you mean 'columns'?)"},
      {"source.columns=0", "source.columns: expected an integer in 1..4096, found '0'"},
      {"source.separator=';;'", "source.separator: expected one character, found ';;'"},
      {"transforms.0.label=-1", "transforms[0].label: expected an integer in 0..4095, found '-1'"},
      {"transforms.0.lable=1", "transforms[0].lable: unknown key (did you mean 'label'?)"},
      {"source.path=" + dir.path() + "/none.csv", "source.path: cannot open"},
      {"transforms.0.label=7",
       "transforms: transform 0 ('split_label'): label column 7 is past the record's 5 columns"},
  };
  for (const auto& [set, expected] : cases) {
    SCOPED_TRACE(set);
    std::string problems;
    try {
      (void)check_config(parse_config(config_text(records), "records.yaml", {set}));
    } catch (const ConfigError& e) {
      problems = e.what();
    }
    EXPECT_NE(problems.find(expected), std::string::npos) << problems;
  }
  // In the file: located at its line and column.
  std::string text = config_text(records);
  text.replace(text.find("label: 4}"), 9, "label: 4, jiter: 1}");
  std::string problems;
  try {
    (void)parse_config(text, "records.yaml");
  } catch (const ConfigError& e) {
    problems = e.what();
  }
  EXPECT_NE(problems.find("records.yaml:3:44: transforms[0].jiter: unknown key (did you mean 'jitter'?)"),
            std::string::npos)
      << problems;
}

TEST(Plugins, ABadRecordFailsNamingItsLineOrIsSkipped) {
  const testing::TempDir dir("ferry_plugin");
  const Records records = write_records(dir.path(), 20, 3, "1.5,2,x,4,0");
  const std::string sequential = "sampler.shuffle=false";
  Pipeline failing = make_pipeline(parse_config(config_text(records), "records.yaml", {sequential}));
  try {
    while (failing.next()) {
    }
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.sample_index(), 5u);
    // The header is line 1, the records from line 2, a blank and a comment line after record 0.
    EXPECT_NE(std::string(e.what()).find(records.path + ":9: field 'record' (decoder 'text_numbers'): column 3: 'x' "
                                                        "is not a number"),
              std::string::npos)
        << e.what();
  }
  Pipeline skipping =
      make_pipeline(parse_config(config_text(records), "records.yaml", {sequential, "decode.on_error=skip"}));
  uint64_t samples = 0;
  for (const Batch& batch : skipping) {
    for (size_t row = 0; row < batch.batch_size(); ++row) {
      const uint64_t index = batch.sample_indices()[row];
      ASSERT_NE(index, 5u);
      EXPECT_EQ(batch["label"][static_cast<int64_t>(row)].item<int64_t>(),
                static_cast<int64_t>(records.rows[index][4]));
      ++samples;
    }
  }
  EXPECT_EQ(samples, 2u * 19u);
  EXPECT_EQ(skipping.stats().skipped_samples, 2u);
}

std::string load_error(const std::string& path) {
  try {
    load_plugin(path);
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

TEST(Plugins, BadPluginsAreRefusedWithTheirReasonAndRegisterNothing) {
  const testing::TempDir dir("ferry_plugin");
  const std::string text = dir.path() + "/libtext.so";
  std::ofstream(text) << "not a library\n";
  const std::vector<std::pair<std::string, std::string>> cases{
      {dir.path() + "/libmissing.so", "no such file: " + dir.path() + "/libmissing.so"},
      {dir.path(), "is not a file (a shared library, .so)"},
      {text, "cannot be loaded as a shared library: "},
      {bad_plugin("not_a_plugin"), "is not a ferry plugin: it has no ferry_plugin_build and ferry_plugin_register"},
      {bad_plugin("other_version"),
       std::string("was built against ferry 0.0.9 (libtorch 2.1.0), but this is ferry ") + FERRY_VERSION},
      {bad_plugin("throws_on_register"), "failed while registering its extensions: cannot find its model file"},
      {bad_plugin("takes_a_taken_name"), "a decoder named 'raw' is already registered (built in)"},
  };
  for (const auto& [path, expected] : cases) {
    SCOPED_TRACE(path);
    const std::string message = load_error(path);
    EXPECT_NE(message.find("plugin '" + path + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
  EXPECT_EQ(SourceRegistry::global().find("half_registered"), nullptr);
  EXPECT_EQ(TransformRegistry::global().kind("identity"), nullptr);
  for (const std::string& loaded : loaded_plugins()) EXPECT_EQ(loaded.find("bad_plugins"), std::string::npos) << loaded;
  // A config that names one reports it at its place, with the rest of its problems.
  std::string problems;
  try {
    (void)parse_config("plugins:\n  - " + bad_plugin("not_a_plugin") + "\nsource: {kind: from_the_plugin}\n", "p.yaml");
  } catch (const ConfigError& e) {
    problems = e.what();
  }
  EXPECT_NE(problems.find("p.yaml:2:5: plugins[0]: plugin '" + bad_plugin("not_a_plugin") + "' is not a ferry plugin"),
            std::string::npos)
      << problems;
  EXPECT_NE(problems.find("source.kind: expected one of synthetic, megatron, tokens, tar, jsonl, image_folder"), std::string::npos)
      << problems;
}

// The command, as a child process: its exit status and what it printed.
struct Ran {
  int status = -1;
  std::string output;
};

Ran run_ferry(const std::string& arguments) {
  Ran ran;
  FILE* pipe = ::popen((std::string(FERRY_CLI) + " " + arguments + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return ran;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) ran.output.append(buffer, n);
  const int status = ::pclose(pipe);
  ran.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return ran;
}

TEST(Plugins, TheCommandLoadsThemAndExitsTwoForABadOne) {
  const testing::TempDir dir("ferry_plugin");
  const Records records = write_records(dir.path(), 30, 4);
  const std::string config = dir.path() + "/records.yaml";
  std::ofstream(config) << config_text(records);
  const Ran run = run_ferry("run " + config + " --set stats.progress=off");
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("delivered  10 batches, 60 samples"), std::string::npos) << run.output;
  const Ran info = run_ferry("--plugin " + kPlugin + " info");
  EXPECT_EQ(info.status, 0) << info.output;
  EXPECT_NE(info.output.find("csv ("), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("split_label ("), std::string::npos) << info.output;
  const Ran keys = run_ferry("info --keys --plugin " + kPlugin);
  EXPECT_NE(keys.output.find("| `source.columns` | integer in 1..4096 | required | Numbers per record."),
            std::string::npos)
      << keys.output;
  const Ran validate = run_ferry("validate " + config + " --set source.colums=3");
  EXPECT_EQ(validate.status, 2) << validate.output;
  EXPECT_NE(validate.output.find("source.colums: unknown key (did you mean 'columns'?)"), std::string::npos)
      << validate.output;
  for (const std::string& bad : {bad_plugin("not_a_plugin"), bad_plugin("other_version"), dir.path() + "/none.so"}) {
    const Ran refused = run_ferry("--plugin " + bad + " validate " + config);
    EXPECT_EQ(refused.status, 2) << refused.output;
    EXPECT_NE(refused.output.find("plugin '" + bad + "'"), std::string::npos) << refused.output;
    EXPECT_EQ(refused.output.find("terminate"), std::string::npos) << refused.output;
  }
}

}  // namespace
}  // namespace ferry
