// Every config in configs/ is valid; every config in tests/configs/bad/ fails with exactly the
// problems its `# expect:` lines name (location, key, message), before any thread starts, and makes
// `ferry validate` exit with status 2 and print them.
//
// A bad config's header:
//   # set: key.path=value                  an override, as `--set` takes it (optional, repeatable)
//   # expect: 8:14 pool.slab_size: a slab of 64 KiB is smaller than ...
//   # expect: --set pool.slab_size=huge pool.slab_size: expected ...
//   # expect-gpu: ...                       replaces the expect lines on a GPU build with a device
//                                           ("valid": the config is fine there)
// The message is matched as a prefix: the rest may add detail.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/assembly/config_error.h>
#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/io/formats/indexed_dataset_writer.h>
#include <ferry/io/formats/tar_writer.h>
#include <ferry/pipeline/cuda_device.h>
#include "tests/support/temp_dir.h"
#include "tests/support/thread_count.h"

namespace ferry {
namespace {

std::vector<std::string> yaml_files(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* handle = opendir(dir.c_str())) {
    while (const dirent* entry = readdir(handle)) {
      const std::string name = entry->d_name;
      if (name.size() > 5 && name.substr(name.size() - 5) == ".yaml") files.push_back(dir + "/" + name);
    }
    closedir(handle);
  }
  std::sort(files.begin(), files.end());
  return files;
}

struct Expected {
  std::string location;  // "8:14" (in the file) or "--set k=v"
  std::string key;
  std::string message;
};

struct BadConfig {
  std::vector<std::string> overrides;
  std::vector<Expected> expected;  // empty with valid == true
  bool valid = false;
};

Expected parse_expected(std::string text) {
  Expected expected;
  size_t cut = 0;
  if (text.rfind("--set ", 0) == 0) {
    cut = text.find(' ', 6);
  } else {
    cut = text.find(' ');
  }
  expected.location = text.substr(0, cut);
  std::string rest = text.substr(cut + 1);
  if (rest.rfind(": ", 0) == 0) {
    expected.message = rest.substr(2);
  } else {
    const size_t colon = rest.find(": ");
    expected.key = rest.substr(0, colon);
    expected.message = rest.substr(colon + 2);
  }
  return expected;
}

BadConfig read_header(const std::string& path, bool gpu) {
  BadConfig config;
  std::vector<Expected> cpu_expected;
  std::vector<Expected> gpu_expected;
  bool gpu_valid = false;
  std::ifstream file(path);
  for (std::string line; std::getline(file, line) && line.rfind("#", 0) == 0;) {
    if (line.rfind("# set: ", 0) == 0) config.overrides.push_back(line.substr(7));
    if (line.rfind("# expect: ", 0) == 0) cpu_expected.push_back(parse_expected(line.substr(10)));
    if (line == "# expect-gpu: valid")
      gpu_valid = true;
    else if (line.rfind("# expect-gpu: ", 0) == 0)
      gpu_expected.push_back(parse_expected(line.substr(14)));
  }
  const bool use_gpu = gpu && (gpu_valid || !gpu_expected.empty());
  config.valid = use_gpu && gpu_valid;
  config.expected = use_gpu ? gpu_expected : cpu_expected;
  return config;
}

std::string full_location(const std::string& path, const Expected& expected) {
  return expected.location.rfind("--set ", 0) == 0 ? expected.location : path + ":" + expected.location;
}

// Runs the command; its status and what it printed on stdout and stderr.
std::pair<int, std::string> run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  char buffer[4096];
  while (const size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string quoted(const std::string& text) { return "'" + text + "'"; }

bool gpu_available() { return gpu_build() && cuda_device_count() > 0; }

TEST(BadConfigs, ThereAreAtLeastTwentyFive) { EXPECT_GE(yaml_files(FERRY_BAD_CONFIG_DIR).size(), 25u); }

TEST(BadConfigs, EachFailsWithItsExactProblemsBeforeAnyThreadStarts) {
  (void)cuda_device_count();  // the CUDA driver starts threads of its own on first use
  for (const std::string& path : yaml_files(FERRY_BAD_CONFIG_DIR)) {
    SCOPED_TRACE(path);
    const BadConfig bad = read_header(path, gpu_available());
    if (bad.valid) {
      EXPECT_NO_THROW(check_config(load_config(path, bad.overrides)));
      continue;
    }
    ASSERT_FALSE(bad.expected.empty()) << "no # expect: line";
    const size_t threads_before = testing::thread_count();
    std::vector<ConfigProblem> problems;
    try {
      check_config(load_config(path, bad.overrides));
      ADD_FAILURE() << "the config was accepted";
    } catch (const ConfigError& e) {
      problems = e.problems();
    }
    EXPECT_EQ(testing::thread_count(), threads_before) << "validation started a thread";
    ASSERT_EQ(problems.size(), bad.expected.size()) << [&] {
      std::string all;
      for (const ConfigProblem& problem : problems) all += "\n  " + problem.text();
      return all;
    }();
    for (size_t i = 0; i < problems.size(); ++i) {
      const Expected& expected = bad.expected[i];
      EXPECT_EQ(problems[i].location, full_location(path, expected));
      EXPECT_EQ(problems[i].key, expected.key);
      EXPECT_EQ(problems[i].message.substr(0, expected.message.size()), expected.message)
          << "whole message: " << problems[i].message;
    }
  }
}

TEST(BadConfigs, ValidateExitsWithStatusTwoAndPrintsEachProblem) {
  for (const std::string& path : yaml_files(FERRY_BAD_CONFIG_DIR)) {
    SCOPED_TRACE(path);
    const BadConfig bad = read_header(path, gpu_available());
    std::string command = quoted(FERRY_CLI) + " validate " + quoted(path);
    for (const std::string& set : bad.overrides) command += " --set " + quoted(set);
    const auto [status, output] = run_command(command);
    if (bad.valid) {
      EXPECT_EQ(status, 0) << output;
      continue;
    }
    EXPECT_EQ(status, 2) << output;
    for (const Expected& expected : bad.expected) {
      const std::string line =
          full_location(path, expected) + ": " + (expected.key.empty() ? "" : expected.key + ": ") + expected.message;
      EXPECT_NE(output.find(line), std::string::npos) << "expected to find\n  " << line << "\nin\n" << output;
    }
  }
}

TEST(ShippedConfigs, EachValidates) {
  // The configs that read a dataset get a small one, as `ferry make-dataset` would write it.
  const testing::TempDir dir("ferry_shipped_configs");  // removed with everything in it
  const std::string& folder = dir.path();
  const std::string tokens = folder + "/tokens";
  {
    IndexedDatasetWriter writer(tokens, IndexedDtype::kUInt16);
    writer.add_document(std::vector<int64_t>(10000, 7));
    writer.finalize();
  }
  // Validation reads no pixel: the image files need not be JPEGs here.
  const std::string shards = folder + "/shard-{000000..000003}.tar";
  for (int s = 0; s < 4; ++s) {
    TarWriter tar;
    tar.add("00000" + std::to_string(s) + ".jpg", "an image");
    tar.add("00000" + std::to_string(s) + ".cls", std::to_string(s));
    TarWriter::write_file(folder + "/shard-00000" + std::to_string(s) + ".tar", tar.finish());
  }
  const std::string images = folder + "/images";
  ::mkdir(images.c_str(), 0755);
  ::mkdir((images + "/class-000").c_str(), 0755);
  std::ofstream(images + "/class-000/000000.jpg") << "an image";
  const std::vector<std::string> files = yaml_files(FERRY_CONFIG_DIR);
  ASSERT_FALSE(files.empty());
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    std::vector<std::string> overrides;
    if (path.find("/megatron.yaml") != std::string::npos) overrides.push_back("source.prefix=" + tokens);
    if (path.find("/tar.yaml") != std::string::npos) overrides.push_back("source.shards=" + shards);
    if (path.find("/image-folder.yaml") != std::string::npos || path.find("/imagenet-train.yaml") != std::string::npos) {
      overrides.push_back("source.root=" + images);
    }
    EXPECT_NO_THROW(check_config(load_config(path, overrides)));
  }
}

}  // namespace
}  // namespace ferry
