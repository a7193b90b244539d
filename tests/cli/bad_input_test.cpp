// What the `ferry` command does with files and arguments that are not what it needs: special files
// where a regular one is read or written (a FIFO would block the open, deaf to signals; a rename
// would replace a device), outputs that are its inputs or each other, output that cannot be written,
// options given twice. Each case runs the real binary (FERRY_CLI) with a deadline: a hang fails.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/build_config.h>

#include "tests/support/child_process.h"
#include "tests/support/error_text.h"
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

using testing::contains;
using testing::Result;
using testing::TempDir;

constexpr auto kDeadline = std::chrono::seconds(120);

Result ferry(std::vector<std::string> args, const std::string& stdout_path = "") {
  args.insert(args.begin(), FERRY_CLI);
  return testing::run_program(args, kDeadline, stdout_path);
}

std::string both(const Result& result) {
  return "\n--- " + result.status.describe() + "\n--- stdout ---\n" + result.out + "\n--- stderr ---\n" + result.err;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

bool is_fifo(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 && S_ISFIFO(info.st_mode);
}

// A small valid config of the synthetic source, written into `dir`.
std::string synthetic_config(const TempDir& dir) {
  const std::string path = dir / "run.yaml";
  write_file(path,
             "source: {kind: synthetic, samples: 64, seed: 3, fields: [{name: x, dtype: uint8, shape: [4]}]}\n"
             "batch_size: 4\ndecode: {threads: 2}\n");
  return path;
}

// Exit 2 within the deadline, naming `part` on stderr.
void expect_refused(const Result& result, const std::string& part) {
  EXPECT_TRUE(result.status.is(2)) << both(result);
  EXPECT_TRUE(contains(result.err, part)) << "expected '" << part << "' in" << both(result);
}

TEST(BadInput, FifosWhereAFileIsReadAreRefusedWithoutWaiting) {
  const TempDir dir("ferry_bad_input");
  const std::string fifo = dir / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string config = synthetic_config(dir);

  // A config, a saved state.
  expect_refused(ferry({"run", fifo}), "is a FIFO");
  expect_refused(ferry({"validate", fifo}), "is a FIFO");
  expect_refused(ferry({"run", config, "--resume", fifo}), "is a FIFO, not a saved pipeline state");

  // A tar shard.
  const std::string tar = dir / "tar.yaml";
  write_file(tar, "source: {kind: tar, shards: " + fifo +
                      ", members: [{name: x, extension: bin, decoder: raw, dtype: uint8, shape: [4]}]}\n"
                      "batch_size: 4\n");
  expect_refused(ferry({"run", tar}), "is a FIFO, not a regular file");

  // Either half of a Megatron dataset.
  ASSERT_TRUE(ferry({"make-dataset", "tokens", dir / "tokens", "--documents", "20"}).status.is(0));
  const std::string megatron = dir / "megatron.yaml";
  write_file(megatron, "source: {kind: megatron, prefix: " + (dir / "tokens") + ", seq_len: 8}\nbatch_size: 2\n");
  ASSERT_TRUE(ferry({"validate", megatron}).status.is(0));
  for (const std::string suffix : {".idx", ".bin"}) {
    const std::string path = dir / ("tokens" + suffix);
    const std::string kept = path + ".kept";
    ASSERT_EQ(::rename(path.c_str(), kept.c_str()), 0);
    ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
    expect_refused(ferry({"run", megatron}), "tokens" + suffix + "' is a FIFO");
    ::unlink(path.c_str());
    ASSERT_EQ(::rename(kept.c_str(), path.c_str()), 0);
  }
}

TEST(BadInput, OutputsThatAreNotFilesAreRefusedBeforeTheRunAndLeftAsTheyWere) {
  const TempDir dir("ferry_bad_input");
  const std::string fifo = dir / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string config = synthetic_config(dir);
  for (const std::string option : {"--save-state", "--report", "--digest"}) {
    SCOPED_TRACE(option);
    expect_refused(ferry({"run", config, option, fifo}), "is a FIFO, not a regular file");
    EXPECT_TRUE(is_fifo(fifo));
    expect_refused(ferry({"run", config, option, "/dev/null"}), "is a character device");
    expect_refused(ferry({"run", config, option, dir.path()}), "'" + dir.path() + "' is a");  // folder, directory
  }
  // From the config's own key too.
  expect_refused(ferry({"run", config, "--set", "stats.report=" + fifo}), "stats.report: '" + fifo + "' is a FIFO");
}

TEST(BadInput, OutputsThatAreInputsOrEachOtherAreRefusedAndNothingIsOverwritten) {
  const TempDir dir("ferry_bad_input");
  const std::string config = synthetic_config(dir);
  const std::string config_text = read_file(config);
  // Spelled otherwise, through a link: still the same file.
  ASSERT_EQ(::symlink(config.c_str(), (dir / "link.yaml").c_str()), 0);
  expect_refused(ferry({"run", config, "--report", config}), "is the config");
  expect_refused(ferry({"run", config, "--save-state", dir / "./link.yaml"}), "is the config");
  expect_refused(ferry({"run", config, "--digest", config}), "is the config");
  EXPECT_EQ(read_file(config), config_text);

  const std::string out = dir / "out.json";
  expect_refused(ferry({"run", config, "--save-state", out, "--report", dir.path() + "/./out.json"}),
                 "each would overwrite the other");
  expect_refused(ferry({"run", config, "--digest", out, "--report", out}), "each would overwrite the other");
  EXPECT_NE(::access(out.c_str(), F_OK), 0) << "nothing is written by a refused run";

  // A saved state is an input the run may replace: going on from a state and saving where it stopped
  // into the same file is how a preempted job resumes.
  const std::string state = dir / "state.json";
  ASSERT_TRUE(ferry({"run", config, "--batches", "3", "--save-state", state}).status.is(0));
  const Result again = ferry({"run", config, "--resume", state, "--batches", "5", "--save-state", state});
  EXPECT_TRUE(again.status.is(0)) << both(again);
  EXPECT_TRUE(contains(read_file(state), "\"next_batch\": 5")) << read_file(state);
  expect_refused(ferry({"run", config, "--resume", state, "--report", state}), "is --resume");
}

TEST(BadInput, SaveStateWritesThroughALinkAndKeepsIt) {
  const TempDir dir("ferry_bad_input");
  const std::string config = synthetic_config(dir);
  ASSERT_EQ(::mkdir((dir / "states").c_str(), 0755), 0);
  write_file(dir / "states/real.json", "an older state");
  const std::string link = dir / "latest.json";
  ASSERT_EQ(::symlink("states/real.json", link.c_str()), 0);
  const Result saved = ferry({"run", config, "--batches", "4", "--save-state", link});
  ASSERT_TRUE(saved.status.is(0)) << both(saved);
  struct stat info {};
  ASSERT_EQ(::lstat(link.c_str(), &info), 0);
  EXPECT_TRUE(S_ISLNK(info.st_mode)) << "the link was replaced by a file";
  EXPECT_TRUE(contains(read_file(dir / "states/real.json"), "\"next_batch\": 4"));
  EXPECT_NE(::access((dir / "states/real.json.partial").c_str(), F_OK), 0);
  // And the resume reads it through the link.
  const Result resumed = ferry({"run", config, "--resume", link});
  EXPECT_TRUE(resumed.status.is(0)) << both(resumed);
  EXPECT_TRUE(contains(resumed.err, "at batch 4")) << both(resumed);
}

TEST(BadInput, OutputThatCannotBeWrittenToStandardOutputIsAnError) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full on this machine";
  const TempDir dir("ferry_bad_input");
  const std::string config = synthetic_config(dir);
  const std::string state = dir / "state.json";
  const Result run = ferry({"run", config, "--batches", "2", "--save-state", state}, "/dev/full");
  EXPECT_TRUE(run.status.is(1)) << both(run);
  EXPECT_TRUE(contains(run.err, "cannot write the report to standard output")) << both(run);
  EXPECT_TRUE(contains(read_file(state), "\"next_batch\": 2")) << "the state is still saved";

  const Result validate = ferry({"validate", config}, "/dev/full");
  EXPECT_TRUE(validate.status.is(1)) << both(validate);
  EXPECT_TRUE(contains(validate.err, "standard output")) << both(validate);

  const Result made = ferry({"make-dataset", "tokens", dir / "tokens", "--documents", "10"}, "/dev/full");
  EXPECT_TRUE(made.status.is(1)) << both(made);
  EXPECT_TRUE(contains(made.err, "standard output")) << both(made);

  for (const std::vector<std::string>& args : {std::vector<std::string>{"info"}, {"--version"}, {"--help"}}) {
    const Result printed = ferry(args, "/dev/full");
    EXPECT_TRUE(printed.status.is(1)) << args[0] << both(printed);
  }
}

TEST(BadInput, ArgumentsThatWouldBeSilentlyDroppedAreRefused) {
  const TempDir dir("ferry_bad_input");
  const std::string config = synthetic_config(dir);
  expect_refused(ferry({"version", "--foo"}), "version takes no arguments");
  expect_refused(ferry({"--version", "extra"}), "version takes no arguments");
  for (const std::string option : {"--save-state", "--resume", "--report", "--digest", "--batches", "--epochs"}) {
    const std::string value = option == "--batches" || option == "--epochs" ? "1" : dir / "x.json";
    expect_refused(ferry({"run", config, option, value, option, value}), option + " is given twice");
  }
  expect_refused(ferry({"run", config, "--batches", "0"}), "--batches: 0 batches");
  // "--" ends the options: what follows is the config, even when it starts with '-'.
  const std::string dashed = dir / "-dashed.yaml";
  write_file(dashed, read_file(config));
  const Result ended = ferry({"validate", "--", dashed});
  EXPECT_TRUE(ended.status.is(0)) << both(ended);
}

TEST(BadInput, ImageFolderEntriesThatAreNotFilesAreCountedInTheReport) {
  const TempDir dir("ferry_bad_input");
  const std::string root = dir / "images";
  ASSERT_TRUE(ferry({"make-dataset", "images", root, "--samples", "6", "--classes", "2", "--image-size", "32"})
                  .status.is(0));
  ASSERT_EQ(::symlink((dir / "gone.jpg").c_str(), (root + "/class-000/dangling.jpg").c_str()), 0);
  ASSERT_EQ(::mkfifo((root + "/class-001/fifo.jpg").c_str(), 0644), 0);
  ASSERT_EQ(::symlink("nothing", (root + "/class-001/notes.txt").c_str()), 0);  // not an image's name
  const std::string config = dir / "images.yaml";
  write_file(config, "source: {kind: image_folder, root: " + root +
                         ", image: {shape: [32, 32, 3]}}\nbatch_size: 2\n");
  const std::string report = dir / "report.json";
  const Result run = ferry({"run", config, "--report", report});
  ASSERT_TRUE(run.status.is(0)) << both(run);
  EXPECT_TRUE(contains(run.out, "6 samples; 2 entries with an image's name left out")) << both(run);
  EXPECT_TRUE(contains(read_file(report), "2 entries with an image's name left out")) << read_file(report);
  EXPECT_TRUE(is_fifo(root + "/class-001/fifo.jpg"));
}

// A tar member that is a hard link has no data of its own: the missing member's message says so.
TEST(BadInput, AHardLinkWhereATarMemberShouldBeIsNamedAsOne) {
  const TempDir dir("ferry_bad_input");
  ASSERT_EQ(::mkdir((dir / "files").c_str(), 0755), 0);
  write_file(dir / "files/a.bin", "abcd");
  write_file(dir / "files/a.cls", "1");
  ASSERT_EQ(::link((dir / "files/a.bin").c_str(), (dir / "files/b.bin").c_str()), 0);
  write_file(dir / "files/b.cls", "2");
  const std::string shard = dir / "links.tar";
  const Result tar = testing::run_program(
      {"/bin/sh", "-c", "cd " + (dir / "files") + " && exec tar cf " + shard + " a.bin a.cls b.bin b.cls"}, kDeadline);
  ASSERT_TRUE(tar.status.is(0)) << both(tar);
  const std::string config = dir / "links.yaml";
  write_file(config, "source: {kind: tar, shards: " + shard +
                         ", members: [{name: x, extension: bin, decoder: raw, dtype: uint8, shape: [4]}]}\n"
                         "batch_size: 1\n");
  const Result run = ferry({"run", config});
  EXPECT_TRUE(run.status.is(1)) << both(run);
  EXPECT_TRUE(contains(run.err, "its 'b.bin' is a hard link to 'a.bin', which holds no data")) << both(run);
}

// Under a limit on memory (ulimit -v, as containers set), 1024 decode threads cannot all be made: an
// error naming decode.threads and exit 1, not SIGABRT from inside oneTBB.
TEST(BadInput, ThreadsThatCannotBeMadeAreAnErrorNamingDecodeThreads) {
  if (FERRY_WITH_GPU) GTEST_SKIP() << "a GPU build maps the CUDA libraries' address space: a limit on it stops CUDA";
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory needs more address space than the limit leaves";
#endif
  for (const char* threads : {"1024", "200"}) {
    SCOPED_TRACE(threads);
    const std::string command = "ulimit -v 900000 && exec " + std::string(FERRY_CLI) +
                                " run --batches 3 --set transfer.device=cpu --set decode.threads=" + threads;
    const Result run = testing::run_program({"/bin/sh", "-c", command}, kDeadline);
    EXPECT_TRUE(run.status.is(1)) << both(run);
    EXPECT_TRUE(contains(run.err, "decode.threads")) << both(run);
    EXPECT_FALSE(contains(run.err, "terminate called")) << both(run);
  }
}

// A dataset cache keeps samples decoded on the CPU: a jpeg field with device: auto decodes there, on
// every build; device: gpu is refused when the config is checked.
TEST(BadInput, AutoDecodingWithTheCacheRunsOnTheCpu) {
  const TempDir dir("ferry_bad_input");
  const std::string root = dir / "images";
  ASSERT_TRUE(ferry({"make-dataset", "images", root, "--samples", "6", "--classes", "2", "--image-size", "32"})
                  .status.is(0));
  const std::string config = dir / "cached.yaml";
  write_file(config, "source: {kind: image_folder, root: " + root +
                         ", image: {shape: [32, 32, 3], device: auto}}\nbatch_size: 2\ncache: {memory: host}\n"
                         "transfer: {device: cpu}\nsampler: {epochs: 2}\n");
  const Result run = ferry({"run", config});
  EXPECT_TRUE(run.status.is(0)) << both(run);
  expect_refused(ferry({"validate", config, "--set", "source.image.device=gpu"}), "(device: gpu)");
}

}  // namespace
}  // namespace ferry
