// The `ferry` command as a user meets it: the real binary (FERRY_CLI) run as a child process
// (tests/support/child_process.h), its stdout and stderr captured on separate pipes, its exit status
// checked.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/build_config.h>
#include <ferry/pipeline/cuda_device.h>

#include "tests/support/child_process.h"
#include "tests/support/error_text.h"
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Child;
using testing::Clock;
using testing::contains;
using testing::ExitStatus;
using testing::Result;

constexpr const char* kPython = "/usr/bin/python3";

// Deadlines for things that take well under a second on an idle machine; generous because the test
// machine may be busy building. None of them is an assertion about speed, only a guard against hangs.
constexpr Clock::duration kRunDeadline = seconds(120);
constexpr Clock::duration kProgressDeadline = seconds(60);
// After SIGINT: far beyond the one second ferry promises, so a slow stop is measured, not cut off.
constexpr Clock::duration kStopDeadline = seconds(10);

Result run_program(const std::vector<std::string>& argv, Clock::duration deadline = kRunDeadline) {
  return testing::run_program(argv, deadline);
}

std::vector<std::string> ferry_args(std::vector<std::string> args) {
  args.insert(args.begin(), FERRY_CLI);
  return args;
}

Result ferry(const std::vector<std::string>& args) { return run_program(ferry_args(args)); }

std::string both(const Result& result) { return "\n--- stdout ---\n" + result.out + "\n--- stderr ---\n" + result.err; }

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> all;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) all.push_back(line);
  return all;
}

bool has_progress_line(const std::string& err) {
  for (const std::string& line : lines(err)) {
    if (line.rfind("ferry: batch ", 0) == 0 && contains(line, "samples/s")) return true;
  }
  return false;
}

bool have_python() { return ::access(kPython, X_OK) == 0; }

// A fresh folder for one test's files, removed at the end.
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("ferry_cli_test") {}
};

// The values of a report's JSON that these tests check: batches, samples, interrupted, exit_status.
std::vector<std::string> report_values(const std::string& path) {
  const Result result =
      run_program({kPython, "-c",
                   "import json, sys\n"
                   "r = json.load(open(sys.argv[1]))\n"
                   "print(r['totals']['batches'], r['totals']['samples'], str(r['run']['interrupted']).lower(), "
                   "r['run']['exit_status'])\n",
                   path});
  EXPECT_TRUE(result.status.is(0)) << result.status << both(result);
  std::vector<std::string> values;
  std::istringstream in(result.out);
  for (std::string value; in >> value;) values.push_back(value);
  return values;
}

void expect_matches_schema(const std::string& path) {
  const Result check = run_program({kPython, FERRY_SOURCE_DIR "/tests/assembly/check_json_schema.py",
                                    FERRY_SOURCE_DIR "/docs/report.schema.json", path});
  EXPECT_TRUE(check.status.is(0)) << "check_json_schema.py: " << check.status << both(check);
}

// ---- run -------------------------------------------------------------------------------------------

TEST(FerryRun, RunWritesAJsonReportThatMatchesItsSchema) {
  if (!have_python()) GTEST_SKIP() << kPython << " not found: the schema check needs a Python interpreter";
  const TempDir dir;
  const std::string report = dir / "r.json";
  const Result run = ferry({"run", "--batches", "5", "--set", "decode.threads=2", "--report", report});
  ASSERT_TRUE(run.status.is(0)) << run.status << both(run);
  EXPECT_TRUE(contains(run.out, "delivered  5 batches, 320 samples")) << both(run);
  EXPECT_TRUE(contains(run.err, "report written to " + report)) << both(run);
  ASSERT_EQ(::access(report.c_str(), R_OK), 0) << report << " was not written";
  expect_matches_schema(report);
  // The demo's batches are 64 samples.
  EXPECT_EQ(report_values(report), (std::vector<std::string>{"5", "320", "false", "0"}));
}

TEST(FerryRun, TraceHasASpanForEveryStageAndBatchThatTheReportCounts) {
  if (!have_python()) GTEST_SKIP() << kPython << " not found: the trace check needs a Python interpreter";
  const TempDir dir;
  const std::string trace = dir / "t.json";
  const std::string report = dir / "r.json";
  const Result run =
      ferry({"run", "--batches", "7", "--set", "decode.threads=2", "--trace", trace, "--report", report});
  ASSERT_TRUE(run.status.is(0)) << run.status << both(run);
  // Per stage: its spans, the report's batches out, and whether batches 0..6 all have one.
  const Result check =
      run_program({kPython, "-c",
                   "import json, sys\n"
                   "events = json.load(open(sys.argv[1]))\n"
                   "report = json.load(open(sys.argv[2]))\n"
                   "for stage in report['stages'][1:]:\n"
                   "    spans = [e for e in events if e['ph'] == 'X' and e['name'] == stage['name']]\n"
                   "    batches = {e['args']['batch'] for e in spans}\n"
                   "    print(stage['name'], len(spans) == stage['items_out'], set(range(7)) <= batches)\n",
                   trace, report});
  ASSERT_TRUE(check.status.is(0)) << check.status << both(check);
  EXPECT_EQ(check.out, "collate True True\npack True True\nh2d True True\nevent-wait True True\n") << both(check);
}

TEST(FerryRun, TraceOntoTheReportOrTheConfigIsRefusedBeforeTheRun) {
  const TempDir dir;
  const std::string same = dir / "out.json";
  const Result onto_report = ferry({"run", "--batches", "2", "--trace", same, "--report", same});
  EXPECT_TRUE(onto_report.status.is(2)) << onto_report.status << both(onto_report);
  EXPECT_TRUE(contains(onto_report.err, "--trace")) << both(onto_report);
  const std::string config = dir / "c.yaml";
  std::ofstream(config) << "source: {kind: synthetic, samples: 8, fields: [{name: x, dtype: uint8, shape: [2]}]}\n";
  const Result onto_config = ferry({"run", config, "--trace", config});
  EXPECT_TRUE(onto_config.status.is(2)) << onto_config.status << both(onto_config);
  std::ifstream kept(config);
  std::string first;
  std::getline(kept, first);
  EXPECT_TRUE(contains(first, "synthetic")) << "the config was overwritten: " << first;
}

// Long enough (about 40 batches of 64 images of 3x256x256) that a 100 ms interval prints several lines.
std::vector<std::string> slow_run(const std::string& progress) {
  std::vector<std::string> args = {"run",
                                   "--batches",
                                   "40",
                                   "--set",
                                   "stats.interval=100ms",
                                   "--set",
                                   "decode.threads=1",
                                   "--set",
                                   "source.samples=100000",
                                   "--set",
                                   "source.fields.0.shape=[3,256,256]"};
  if (!progress.empty()) {
    args.push_back("--set");
    args.push_back("stats.progress=" + progress);
  }
  return args;
}

TEST(FerryRun, ProgressIsPlainLinesWhenNotOnATerminal) {
  {
    SCOPED_TRACE("stats.progress=auto with stderr on a pipe");
    const Result run = ferry(slow_run(""));
    ASSERT_TRUE(run.status.is(0)) << run.status << both(run);
    EXPECT_TRUE(has_progress_line(run.err)) << "no line starting 'ferry: batch ' with samples/s" << both(run);
    EXPECT_FALSE(contains(run.err, "\r")) << "a carriage return on a pipe" << both(run);
    EXPECT_FALSE(contains(run.err, "\x1b[")) << "an ANSI escape on a pipe" << both(run);
    EXPECT_TRUE(contains(run.out, "delivered  40 batches, 2560 samples")) << both(run);
  }
  {
    SCOPED_TRACE("stats.progress=off");
    const Result run = ferry(slow_run("off"));
    ASSERT_TRUE(run.status.is(0)) << run.status << both(run);
    EXPECT_FALSE(contains(run.err, "ferry: batch ")) << both(run);
    EXPECT_TRUE(contains(run.out, "delivered  40 batches, 2560 samples")) << both(run);
  }
  {
    SCOPED_TRACE("stats.progress=live");
    const Result run = ferry(slow_run("live"));
    ASSERT_TRUE(run.status.is(0)) << run.status << both(run);
    EXPECT_TRUE(contains(run.err, "\r")) << "live progress rewrites its line in place" << both(run);
    EXPECT_TRUE(contains(run.err, "ferry: batch ")) << both(run);
    EXPECT_TRUE(contains(run.out, "delivered  40 batches, 2560 samples")) << both(run);
  }
}

// ---- Ctrl-C ----------------------------------------------------------------------------------------

// A run that would last for days; it prints a plain progress line every 100 ms.
std::vector<std::string> endless_run() {
  return {"run",
          "--set",
          "source.samples=10000000",
          "--set",
          "source.fields.0.shape=[3,256,256]",
          "--set",
          "stats.interval=100ms",
          "--epochs",
          "100"};
}

struct Interrupted {
  bool progressed = false;  // false: no progress line came, so no signal was sent
  ExitStatus status;
  Clock::duration signal_to_exit{};
  std::string out;
  std::string err;
};

// Starts `args`, waits for its first progress line, then `after` more, sends `signal` and waits for the end.
Interrupted interrupt_run(const std::vector<std::string>& args, Clock::duration after, int signal = SIGINT) {
  Child child(ferry_args(args));
  const bool progressed = child.read_until(has_progress_line, Clock::now() + kProgressDeadline);
  EXPECT_TRUE(progressed) << "no progress line before the deadline\n--- stderr ---\n" << child.err();
  if (!progressed) return {};
  if (after > Clock::duration::zero()) {
    // Keep reading meanwhile so a full pipe cannot stall the run.
    child.read_until([](const std::string&) { return false; }, Clock::now() + after);
  }
  const Clock::time_point signalled = Clock::now();
  EXPECT_EQ(::kill(child.pid(), signal), 0) << std::strerror(errno);
  const auto [status, ended] = child.wait(signalled + kStopDeadline);
  return {true, status, ended - signalled, child.out(), child.err()};
}

std::string in_ms(Clock::duration duration) {
  return std::to_string(std::chrono::duration_cast<milliseconds>(duration).count()) + " ms";
}

TEST(FerryRun, CtrlCStopsCleanlyWithAReportWithinASecond) {
  // ferry promises a stop within a second of Ctrl-C, whenever it comes (longer under a sanitizer:
  // ThreadSanitizer alone takes ~0.4 s to tear a process down).
  constexpr Clock::duration kBound = seconds(1) * FERRY_TEST_TIME_SCALE;
  for (const Clock::duration after :
       {Clock::duration(milliseconds(0)), Clock::duration(milliseconds(300)), Clock::duration(milliseconds(1000))}) {
    SCOPED_TRACE("SIGINT " + in_ms(after) + " after the first progress line");
    const Interrupted run = interrupt_run(endless_run(), after);
    if (!run.progressed) break;  // already reported; the other moments would only repeat it
    std::cout << "[ measured ] SIGINT " << in_ms(after) << " after the first progress line: exit "
              << in_ms(run.signal_to_exit) << " after the signal\n";
    EXPECT_TRUE(run.status.is(130)) << run.status << "\n--- stdout ---\n" << run.out << "\n--- stderr ---\n" << run.err;
    EXPECT_LE(run.signal_to_exit, kBound) << "took " << in_ms(run.signal_to_exit);
    EXPECT_TRUE(contains(run.out, "  delivered  ")) << "no report on stdout\n" << run.out;
    EXPECT_TRUE(contains(run.out, "interrupted")) << run.out;
    EXPECT_TRUE(contains(run.err, "interrupted")) << run.err;
    if (run.status.timed_out) break;  // a hang: the other moments would only repeat it
  }
}

TEST(FerryRun, CtrlCWritesAJsonReportThatSaysInterrupted) {
  if (!have_python()) GTEST_SKIP() << kPython << " not found: the schema check needs a Python interpreter";
  const TempDir dir;
  const std::string report = dir / "r.json";
  std::vector<std::string> args = endless_run();
  args.push_back("--report");
  args.push_back(report);
  const Interrupted run = interrupt_run(args, milliseconds(300));
  ASSERT_TRUE(run.progressed);
  std::cout << "[ measured ] SIGINT 300 ms after the first progress line, with --report: exit "
            << in_ms(run.signal_to_exit) << " after the signal\n";
  EXPECT_TRUE(run.status.is(130)) << run.status << "\n--- stderr ---\n" << run.err;
  EXPECT_LE(run.signal_to_exit, seconds(1) * FERRY_TEST_TIME_SCALE) << "took " << in_ms(run.signal_to_exit);
  EXPECT_TRUE(contains(run.err, "report written to " + report)) << run.err;
  ASSERT_EQ(::access(report.c_str(), R_OK), 0) << run.err;
  expect_matches_schema(report);
  const std::vector<std::string> values = report_values(report);
  ASSERT_EQ(values.size(), 4u);
  EXPECT_NE(values[0], "0") << "no batch counted before the interrupt";
  EXPECT_EQ(values[2], "true");  // interrupted
  EXPECT_EQ(values[3], "130");   // exit_status
}

// ---- validate, info, usage -------------------------------------------------------------------------

TEST(FerryValidate, ValidateExitsZeroAndSummarisesAGoodConfig) {
  const std::string config = FERRY_SOURCE_DIR "/configs/demo.yaml";
  const Result result = ferry({"validate", config});
  EXPECT_TRUE(result.status.is(0)) << result.status << both(result);
  EXPECT_TRUE(contains(result.out, config + ": valid")) << both(result);
  EXPECT_TRUE(contains(result.out, "batches of 64")) << both(result);
}

TEST(FerryInfo, InfoNamesVersionsAndDevices) {
  const Result result = ferry({"info"});
  EXPECT_TRUE(result.status.is(0)) << result.status << both(result);
  for (const char* part : {"ferry ", "libtorch", "oneTBB", "CUDA runtime", "CUDA driver", "devices"}) {
    EXPECT_TRUE(contains(result.out, part)) << "no '" << part << "'" << both(result);
  }
}

TEST(FerryUsage, UsageErrorsExitTwo) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> named;  // what stderr must mention
    bool usage = true;               // a usage error (not a config's): points to --help
  };
  const std::vector<Case> cases = {
      {{}, {"usage: ferry run"}},
      {{"run", "--bogus"}, {"unknown option '--bogus'"}},
      {{"run", "a.yaml", "b.yaml"}, {"one config at a time", "a.yaml", "b.yaml"}},
      {{"run", "--batches", "x"}, {"--batches", "'x'"}},
      {{"run", "--batches"}, {"--batches needs a value"}},
      {{"frobnicate"}, {"unknown command 'frobnicate'"}},
      {{"validate"}, {"validate needs a CONFIG"}},
      {{"run", "/nonexistent.yaml"}, {"/nonexistent.yaml", "cannot open"}, /*usage=*/false},
      {{"validate", "/dev/zero"}, {"/dev/zero: is a character device, not a config file"}, /*usage=*/false},
      {{"validate", "/tmp"}, {"/tmp: is a directory"}, /*usage=*/false},
      {{"run", FERRY_SOURCE_DIR "/configs/demo.yaml", "--resume", "/tmp"},
       {"/tmp: is a directory, not a saved pipeline state"},
       /*usage=*/false},
  };
  for (const Case& c : cases) {
    std::string command = "ferry";
    for (const std::string& arg : c.args) command += " " + arg;
    SCOPED_TRACE(command);
    const Result result = ferry(c.args);
    EXPECT_TRUE(result.status.is(2)) << result.status << both(result);
    for (const std::string& part : c.named) {
      EXPECT_TRUE(contains(result.err, part)) << "stderr does not name '" << part << "'" << both(result);
    }
    EXPECT_TRUE(result.out.empty()) << "a usage error printed on stdout" << both(result);
    if (!c.args.empty() && c.usage) {
      // The one line that matters and where to read on, not the whole usage.
      EXPECT_LE(lines(result.err).size(), 2u) << both(result);
      const std::string help = c.args[0] == "frobnicate" ? "'ferry --help'" : "'ferry " + c.args[0] + " --help'";
      EXPECT_TRUE(contains(result.err, help)) << "no pointer to " << help << both(result);
    }
  }
}

TEST(FerryUsage, EachCommandsHelpPrintsItsUsageAndExitsZero) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--help"}, "usage: ferry run"},
      {{"-h"}, "usage: ferry validate"},
      {{"run", "--help"}, "usage: ferry run [CONFIG]"},
      {{"run", "configs/demo.yaml", "--batches", "3", "-h"}, "usage: ferry run [CONFIG]"},
      {{"validate", "--help"}, "usage: ferry validate CONFIG"},
      {{"info", "--help"}, "usage: ferry info [--bandwidth]"},
      {{"make-dataset", "--help"}, "usage: ferry make-dataset tokens OUT"},
      {{"make-dataset", "tar", "--help"}, "usage: ferry make-dataset tokens OUT"},
  };
  for (const auto& [args, usage] : cases) {
    const Result result = ferry(args);
    SCOPED_TRACE(args.front() + (args.size() > 1 ? " " + args[1] : ""));
    EXPECT_TRUE(result.status.is(0)) << result.status << both(result);
    EXPECT_TRUE(contains(result.out, usage)) << both(result);
    EXPECT_TRUE(result.err.empty()) << both(result);
  }
  // One command's help is that command's alone.
  const Result run = ferry({"run", "--help"});
  EXPECT_FALSE(contains(run.out, "usage: ferry validate")) << both(run);
  EXPECT_TRUE(contains(run.out, "--save-state PATH")) << both(run);
}

TEST(FerryUsage, VersionNamesTheVersionAndTheBuild) {
  for (const char* flag : {"--version", "version"}) {
    const Result result = ferry({flag});
    EXPECT_TRUE(result.status.is(0)) << result.status << both(result);
    EXPECT_TRUE(contains(result.out, std::string("ferry ") + FERRY_VERSION + " (")) << both(result);
    EXPECT_TRUE(contains(result.out, std::string("libtorch ") + FERRY_TORCH_VERSION)) << both(result);
    // Whether the jpeg decoder can use the GPU (bench/augment.py reads it).
    EXPECT_TRUE(contains(result.out, FERRY_NVJPEG ? "nvjpeg: yes" : "nvjpeg: no")) << both(result);
  }
}

TEST(FerryRun, SetOverridesReachTheRun) {
  {
    const Result run = ferry({"run", "--batches", "3", "--set", "batch_size=10", "--set", "transfer.device=cpu"});
    ASSERT_TRUE(run.status.is(0)) << run.status << both(run);
    EXPECT_TRUE(contains(run.out, "delivered  3 batches, 30 samples")) << both(run);
    EXPECT_TRUE(contains(run.err, "3 batches of 10 to cpu")) << both(run);
  }
  {
    const Result run = ferry({"run", "--set", "pool.slab_size=1KiB"});
    EXPECT_TRUE(run.status.is(2)) << run.status << both(run);
    EXPECT_TRUE(contains(run.err, "--set pool.slab_size=1KiB: pool.slab_size: a slab of 1 KiB is smaller"))
        << both(run);
    EXPECT_FALSE(contains(run.out, "delivered")) << "an invalid config ran" << both(run);
  }
}

// ---- --save-state / --resume -------------------------------------------------------------------------

namespace resume {

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// A shuffled two-epoch run small enough to finish in a second or two.
std::vector<std::string> shuffled_run(const std::vector<std::string>& more) {
  std::vector<std::string> args = {"run",
                                   "--set",
                                   "source.samples=2000",
                                   "--set",
                                   "batch_size=50",
                                   "--set",
                                   "sampler.shuffle=true",
                                   "--set",
                                   "sampler.seed=11",
                                   "--epochs",
                                   "2",
                                   "--set",
                                   "stats.progress=off"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace resume

// Stop after N batches, resume in a new process, and the two runs' batches, one
// after the other, are bit-identical to an uninterrupted run's — whatever the thread counts and
// prefetch depths of the parts.
TEST(FerryResume, ANewProcessContinuesBitForBitWhereTheLastStopped) {
  const TempDir dir;
  const Result full = ferry(resume::shuffled_run({"--digest", dir / "full.txt"}));
  ASSERT_TRUE(full.status.is(0)) << full.status << both(full);
  const std::string expected = resume::read_file(dir / "full.txt");
  ASSERT_EQ(lines(expected).size(), 80u);   // 2 epochs of 40 batches
  for (const int stop : {1, 39, 40, 79}) {  // (--batches 0 means no limit)
    SCOPED_TRACE("stopped after " + std::to_string(stop) + " batches");
    const Result first = ferry(resume::shuffled_run({"--batches", std::to_string(stop), "--set", "decode.threads=3",
                                                     "--digest", dir / "a.txt", "--save-state", dir / "state.json"}));
    ASSERT_TRUE(first.status.is(0)) << first.status << both(first);
    EXPECT_TRUE(
        contains(first.err, "state saved to " + (dir / "state.json") + " (next batch " + std::to_string(stop) + ")"))
        << both(first);
    const Result second = ferry(resume::shuffled_run({"--resume", dir / "state.json", "--set", "decode.threads=1",
                                                      "--set", "prefetch=6", "--digest", dir / "b.txt"}));
    ASSERT_TRUE(second.status.is(0)) << second.status << both(second);
    EXPECT_EQ(resume::read_file(dir / "a.txt") + resume::read_file(dir / "b.txt"), expected);
  }
}

// transfer.devices: a group's run stopped and resumed in a new process delivers, device by device, what
// an uninterrupted run of the group delivers; its report has an object per device and matches the schema.
TEST(FerryResume, AGroupOfDevicesResumesBitForBitAndReportsEachDevice) {
  const TempDir dir;
  const std::vector<std::string> group = {"--set", "transfer.devices=[cpu, cpu, cpu]"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), group.begin(), group.end());
    return resume::shuffled_run(more);
  };
  const Result full = ferry(with({"--digest", dir / "full.txt", "--report", dir / "r.json"}));
  ASSERT_TRUE(full.status.is(0)) << full.status << both(full);
  const std::string expected = resume::read_file(dir / "full.txt");
  // 2000 samples over 3 devices: 667 each (one padded), 14 batches of 50 an epoch, 2 epochs.
  ASSERT_EQ(lines(expected).size(), 3u * 28u);
  EXPECT_TRUE(contains(full.err, "28 steps of a batch of 50 to cpu, cpu, cpu")) << both(full);
  EXPECT_TRUE(contains(full.out, "  device     cpu: 28 batches")) << both(full);
  if (have_python()) expect_matches_schema(dir / "r.json");
  const std::string report = resume::read_file(dir / "r.json");
  EXPECT_TRUE(contains(report, "\"copy_wait_seconds\"")) << report;
  for (const int stop : {1, 14, 27}) {
    SCOPED_TRACE("stopped after " + std::to_string(stop) + " steps");
    const Result first = ferry(with({"--batches", std::to_string(stop), "--set", "decode.threads=3", "--digest",
                                     dir / "a.txt", "--save-state", dir / "state.json"}));
    ASSERT_TRUE(first.status.is(0)) << first.status << both(first);
    EXPECT_TRUE(contains(resume::read_file(dir / "state.json"), "\"format\": \"ferry-states\"")) << both(first);
    const Result second = ferry(with({"--resume", dir / "state.json", "--set", "decode.threads=1", "--set",
                                      "prefetch=5", "--digest", dir / "b.txt"}));
    ASSERT_TRUE(second.status.is(0)) << second.status << both(second);
    EXPECT_EQ(resume::read_file(dir / "a.txt") + resume::read_file(dir / "b.txt"), expected);
  }
  // Another number of devices resumes each from the first device's state (python/tests checks the samples).
  const Result other =
      ferry(resume::shuffled_run({"--set", "transfer.devices=[cpu, cpu]", "--resume", dir / "state.json"}));
  EXPECT_TRUE(other.status.is(0)) << both(other);
  EXPECT_TRUE(contains(other.err, "resuming")) << both(other);
}

// The same for every dataset kind, each made by `ferry make-dataset`, shuffled, with what makes the
// kind's order hard to resume: tar shards through a shard-order shuffle and a shuffle buffer, random
// crops, and an image folder holding a damaged JPEG that `on_error: skip` skips (so batches are
// filled from later samples and the saved position is no multiple of the batch size), also augmented.
TEST(FerryResume, EveryDatasetKindResumesBitForBitInANewProcess) {
  const TempDir dir;
  const auto make = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "make-dataset");
    const Result made = ferry(args);
    ASSERT_TRUE(made.status.is(0)) << made.status << both(made);
  };
  make({"tokens", dir / "tokens", "--documents", "60", "--seed", "3"});
  make({"tar", dir / "shards", "--samples", "90", "--shards", "3", "--image-size", "40x56", "--seed", "4"});
  make({"npy", dir / "npy", "--samples", "90", "--shards", "3", "--seed", "5"});
  make({"images", dir / "images", "--samples", "90", "--image-size", "56x40", "--seed", "6"});
  std::ofstream(dir / "images/class-001/broken.jpg") << "\xff\xd8 not really a JPEG";
  std::ofstream(dir / "npy.yaml") << "source:\n"
                                     "  kind: tar\n"
                                     "  shards: "
                                  << dir / "npy"
                                  << "/shard-{000000..000002}.tar\n"
                                     "  members:\n"
                                     "    - {name: x, extension: npy, decoder: npy, dtype: float32, shape: [64]}\n"
                                     "    - {name: label, extension: cls, decoder: label, dtype: int64, shape: []}\n"
                                     "sampler: {shuffle: true, seed: 8, shuffle_buffer: 16}\n";
  const std::string configs = std::string(FERRY_SOURCE_DIR) + "/configs/";
  const std::vector<std::string> images = {"--set", "source.image.shape=[32,32,3]",
                                           "--set", "source.image.resize_shorter=36",
                                           "--set", "decode.on_error=skip"};
  struct Kind {
    std::string name;
    std::vector<std::string> args;
  };
  const std::vector<Kind> kinds = {
      {"megatron",
       {configs + "megatron.yaml", "--set", "source.prefix=" + dir / "tokens", "--set", "source.seq_len=48"}},
      {"tar",
       {configs + "tar.yaml", "--set", "source.shards=" + dir / "shards/shard-{000000..000002}.tar", "--set",
        "source.members.0.shape=[32,32,3]", "--set", "source.members.0.resize_shorter=36", "--set",
        "sampler.shuffle_buffer=20"}},
      {"npy", {dir / "npy.yaml"}},
      {"image_folder",
       [&] {
         std::vector<std::string> args = {configs + "image-folder.yaml", "--set", "source.root=" + dir / "images"};
         args.insert(args.end(), images.begin(), images.end());
         return args;
       }()},
      // Training-ready batches: random-resized crops and flips drawn per (seed, epoch, sample) by the decoder,
      // and another flip by the augmentation after the copy.
      {"imagenet_train",
       {configs + "imagenet-train.yaml", "--set", "source.root=" + dir / "images", "--set",
        "source.image.shape=[24,20,3]", "--set", "decode.on_error=skip", "--set", "augment.flip=0.5"}},
  };
  for (const Kind& kind : kinds) {
    SCOPED_TRACE(kind.name);
    auto run = [&](std::vector<std::string> more) {
      std::vector<std::string> args = {"run"};
      args.insert(args.end(), kind.args.begin(), kind.args.end());
      const std::vector<std::string> common = {
          "--set", "batch_size=8", "--set", "sampler.shuffle=true", "--epochs", "2", "--set", "stats.progress=off"};
      args.insert(args.end(), common.begin(), common.end());
      args.insert(args.end(), more.begin(), more.end());
      return ferry(args);
    };
    const Result full = run({"--digest", dir / "full.txt", "--set", "decode.threads=2"});
    ASSERT_TRUE(full.status.is(0)) << full.status << both(full);
    const std::string expected = resume::read_file(dir / "full.txt");
    const size_t batches = lines(expected).size();
    ASSERT_GE(batches, 10u);
    for (const size_t stop : {size_t{1}, batches / 2 - 1, batches / 2, batches - 1}) {
      SCOPED_TRACE("stopped after " + std::to_string(stop) + " of " + std::to_string(batches) + " batches");
      const Result first = run({"--batches", std::to_string(stop), "--set", "decode.threads=3", "--digest",
                                dir / "a.txt", "--save-state", dir / "state.json"});
      ASSERT_TRUE(first.status.is(0)) << first.status << both(first);
      const Result second = run({"--resume", dir / "state.json", "--set", "decode.threads=1", "--set", "prefetch=5",
                                 "--digest", dir / "b.txt"});
      ASSERT_TRUE(second.status.is(0)) << second.status << both(second);
      EXPECT_EQ(resume::read_file(dir / "a.txt") + resume::read_file(dir / "b.txt"), expected);
    }
    if (kind.name == "image_folder" || kind.name == "imagenet_train") {
      EXPECT_TRUE(contains(full.err, "broken.jpg")) << "the damaged image was not reported as skipped" << both(full);
    }
  }
}

// Ctrl-C, and SIGTERM (what a job scheduler sends before it kills), exit 128 + the signal.
TEST(FerryResume, CtrlCAndSigtermSaveTheStateAndTheResumeDeliversTheRest) {
  for (const int signal : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(signal == SIGINT ? "SIGINT" : "SIGTERM");
    const TempDir dir;
    // Slow enough (bigger images) that Ctrl-C lands mid-run, yet the rest finishes quickly.
    const std::vector<std::string> base = {"--set", "source.fields.0.shape=[3,128,128]", "--set",
                                           "stats.interval=100ms"};
    auto with = [&](std::vector<std::string> more) {
      more.insert(more.end(), base.begin(), base.end());
      return resume::shuffled_run(more);
    };
    const Result full = ferry(with({"--digest", dir / "full.txt"}));
    ASSERT_TRUE(full.status.is(0)) << full.status << both(full);
    std::vector<std::string> first_args = with({"--digest", dir / "a.txt", "--save-state", dir / "state.json"});
    first_args.erase(std::find(first_args.begin(), first_args.end(), "stats.progress=off") - 1,
                     std::find(first_args.begin(), first_args.end(), "stats.progress=off") + 1);  // progress on
    const Interrupted first = interrupt_run(first_args, milliseconds(0), signal);
    ASSERT_TRUE(first.progressed);
    // 0: it finished first
    ASSERT_TRUE(first.status.is(128 + signal) || first.status.is(0)) << first.status << first.err;
    if (first.status.is(128 + signal)) {
      EXPECT_TRUE(contains(first.err, signal == SIGINT ? "interrupted (SIGINT)" : "interrupted (SIGTERM)"))
          << first.err;
    }
    EXPECT_TRUE(contains(first.err, "state saved to")) << first.err;
    const Result second = ferry(with({"--resume", dir / "state.json", "--digest", dir / "b.txt"}));
    ASSERT_TRUE(second.status.is(0)) << second.status << both(second);
    EXPECT_EQ(resume::read_file(dir / "a.txt") + resume::read_file(dir / "b.txt"), resume::read_file(dir / "full.txt"));
  }
}

// Signals as injected faults: SIGINT or SIGTERM at a random moment of a run, at 1, 2, 4 and 8 decode
// threads. A quarter of the moments fall in the start-up (loading libraries, reading the config, before
// main() has set its handler or the pipeline exists), the rest while batches flow or just after the
// last. A run either died of the signal before the handler was set (then it saved and delivered
// nothing), or stopped with 128 + the signal within a second, or had finished (0). Whatever it
// delivered, followed by what a resume from its state delivers, is bit-identical to an uninterrupted run.
TEST(FerryResume, SignalsAtRandomMomentsStopWithinASecondAndTheResumeDeliversExactlyTheRest) {
  const TempDir dir;
  const std::vector<std::string> base = {"--set", "source.fields.0.shape=[3,96,96]"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), base.begin(), base.end());
    return resume::shuffled_run(more);
  };
  // The uninterrupted run, timed: its start-up ends with the line that announces the batches.
  const auto announced = [](const std::string& err) { return contains(err, " batches of "); };
  Clock::duration startup{}, running{};
  {
    Child child(ferry_args(with({"--digest", dir / "full.txt"})));
    const Clock::time_point started = Clock::now();
    ASSERT_TRUE(child.read_until(announced, started + kProgressDeadline)) << child.err();
    startup = Clock::now() - started;
    const auto [status, ended] = child.wait(Clock::now() + seconds(120));
    ASSERT_TRUE(status.is(0)) << status << "\n--- stderr ---\n" << child.err();
    running = ended - started - startup;
  }
  const std::string expected = resume::read_file(dir / "full.txt");

  std::mt19937 rng(20261127);
  const auto fraction_of = [&](Clock::duration span, double most) {
    return std::chrono::duration_cast<Clock::duration>(span * std::uniform_real_distribution<double>(0.0, most)(rng));
  };
  int before_handler = 0, stopped = 0, finished = 0;
  for (const int threads : {1, 2, 4, 8}) {
    for (int round = 0; round < 4; ++round) {
      const int signal = rng() % 2 == 0 ? SIGINT : SIGTERM;
      const bool in_startup = rng() % 4 == 0;
      const Clock::duration moment = in_startup ? fraction_of(startup, 1.0) : fraction_of(running, 1.1);
      SCOPED_TRACE(std::string(signal == SIGINT ? "SIGINT " : "SIGTERM ") + in_ms(moment) + " after " +
                   (in_startup ? "the start, " : "the announcement, ") + std::to_string(threads) + " decode threads");
      for (const char* name : {"a.txt", "b.txt", "state.json"}) std::remove((dir / name).c_str());
      Child child(ferry_args(with({"--set", "decode.threads=" + std::to_string(threads), "--digest", dir / "a.txt",
                                   "--save-state", dir / "state.json"})));
      if (!in_startup) {
        ASSERT_TRUE(child.read_until(announced, Clock::now() + kProgressDeadline)) << child.err();
      }
      // Keep reading meanwhile so a full pipe cannot stall the run.
      child.read_until([](const std::string&) { return false; }, Clock::now() + moment);
      const Clock::time_point signalled = Clock::now();
      ASSERT_EQ(::kill(child.pid(), signal), 0) << std::strerror(errno);
      const auto [status, ended] = child.wait(signalled + kStopDeadline);
      const std::string output = "\n--- stderr ---\n" + child.err();
      std::vector<std::string> rest = {"--set", "decode.threads=" + std::to_string(1 + rng() % 4), "--digest",
                                       dir / "b.txt"};
      if (status.signal == signal) {
        // Until main() sets the handler, the signal's default action ends the process (loading
        // ferry's libraries takes a moment). Nothing can have been delivered or saved yet.
        ++before_handler;
        EXPECT_TRUE(in_startup) << output;
        EXPECT_EQ(resume::read_file(dir / "a.txt"), "") << output;
        EXPECT_FALSE(std::ifstream(dir / "state.json").good()) << output;
      } else {
        ASSERT_TRUE(status.is(128 + signal) || status.is(0)) << status << output;
        if (status.is(0)) {
          ++finished;
        } else {
          ++stopped;
          EXPECT_LE(ended - signalled, seconds(1) * FERRY_TEST_TIME_SCALE) << "took " << in_ms(ended - signalled);
        }
        ASSERT_TRUE(contains(child.err(), "state saved to")) << output;
        rest.push_back("--resume");
        rest.push_back(dir / "state.json");
      }
      const Result second = ferry(with(rest));
      ASSERT_TRUE(second.status.is(0)) << second.status << both(second);
      EXPECT_EQ(resume::read_file(dir / "a.txt") + resume::read_file(dir / "b.txt"), expected);
    }
  }
  std::cout << "[ measured ] 16 signals (start-up " << in_ms(startup) << ", batches " << in_ms(running)
            << "): " << before_handler << " before the handler was set, " << stopped << " stopped the run, " << finished
            << " came after it finished\n";
}

// Whether this process has caught `signal` (a handler set): /proc/PID/status lists caught signals
// as a hexadecimal mask, bit signal - 1.
bool catches(pid_t pid, int signal) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (signal - 1) & 1) != 0;
  }
  return false;
}

// Waits until `child` has set its SIGINT handler (or the deadline passes); true when it has.
bool wait_for_handler(const Child& child, Clock::time_point deadline) {
  while (!catches(child.pid(), SIGINT) && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(1));
  return catches(child.pid(), SIGINT);
}

// Note [a signal while starting]: SIGINT while the pipeline is being made, as soon as the handler is
// set (the config is still being read) and 60% of the way from there to the announcement of the
// batches (the pipeline is being made). On a GPU machine the start is made slow on purpose (3 GiB of
// pinned slabs, over a second to pin) and both signals must land in it; on the CPU the start is quick
// and the second may come after it. Either way the run stops within a second with 130, saves its state,
// and the resume delivers the rest of the run.
TEST(FerryResume, ASignalWhileThePipelineIsMadeStopsWithinASecondAndTheResumeDeliversTheRun) {
  const TempDir dir;
  const bool gpu = ferry::gpu_build() && ferry::cuda_device_count() > 0;
  auto slow_start = [](std::vector<std::string> more) {
    std::vector<std::string> args = resume::shuffled_run(more);
    for (const char* value : {"pool.slab_size=1GiB", "pool.slab_count=3"}) {
      args.push_back("--set");
      args.push_back(value);
    }
    return args;
  };
  const auto announced = [](const std::string& err) { return contains(err, " batches of "); };
  // The uninterrupted run, its start timed from the handler to the announcement.
  Clock::duration start{};
  {
    Child child(ferry_args(slow_start({"--digest", dir / "full.txt"})));
    ASSERT_TRUE(wait_for_handler(child, Clock::now() + kProgressDeadline)) << "the handler was never set";
    const Clock::time_point handled = Clock::now();
    ASSERT_TRUE(child.read_until(announced, handled + kProgressDeadline)) << child.err();
    start = Clock::now() - handled;
    const auto [status, ended] = child.wait(Clock::now() + kRunDeadline);
    ASSERT_TRUE(status.is(0)) << status << "\n--- stderr ---\n" << child.err();
  }
  const std::string expected = resume::read_file(dir / "full.txt");
  for (const double share : {0.0, 0.6}) {
    SCOPED_TRACE("SIGINT " + in_ms(std::chrono::duration_cast<Clock::duration>(start * share)) +
                 " after the handler was set, of a start of " + in_ms(start));
    for (const char* name : {"a.txt", "b.txt", "state.json", "report.json"}) std::remove((dir / name).c_str());
    Child child(ferry_args(
        slow_start({"--digest", dir / "a.txt", "--save-state", dir / "state.json", "--report", dir / "report.json"})));
    ASSERT_TRUE(wait_for_handler(child, Clock::now() + kProgressDeadline)) << "the handler was never set";
    // Keep reading meanwhile so a full pipe cannot stall the run.
    child.read_until([](const std::string&) { return false; },
                     Clock::now() + std::chrono::duration_cast<Clock::duration>(start * share));
    const Clock::time_point signalled = Clock::now();
    ASSERT_EQ(::kill(child.pid(), SIGINT), 0) << std::strerror(errno);
    const auto [status, ended] = child.wait(signalled + kStopDeadline);
    const std::string output = "\n--- stdout ---\n" + child.out() + "\n--- stderr ---\n" + child.err();
    ASSERT_TRUE(status.is(130) || status.is(0)) << status << output;
    if (status.is(130)) {
      EXPECT_LE(ended - signalled, seconds(1) * FERRY_TEST_TIME_SCALE) << "took " << in_ms(ended - signalled) << output;
      EXPECT_TRUE(contains(child.out(), "interrupted: the counts cover the part that ran") ||
                  contains(child.out(), "interrupted while starting: no batch was delivered"))
          << output;
      EXPECT_TRUE(contains(resume::read_file(dir / "report.json"), "\"interrupted\": true")) << output;
    }
    const bool while_starting = contains(child.err(), "interrupted (SIGINT) while starting, before any batch");
    if (gpu) {
      EXPECT_TRUE(while_starting) << "the signal came after a start that pins 3 GiB" << output;
    }
    if (while_starting) {
      EXPECT_TRUE(std::ifstream(dir / "a.txt").good()) << "no digest: an earlier run's would have stayed" << output;
      EXPECT_EQ(resume::read_file(dir / "a.txt"), "") << output;
      EXPECT_TRUE(contains(child.out(), "interrupted while starting: no batch was delivered")) << output;
      EXPECT_TRUE(contains(child.err(), "state saved to " + (dir / "state.json") + " (next batch 0)")) << output;
    }
    ASSERT_TRUE(contains(child.err(), "state saved to")) << output;
    const Result second = ferry(resume::shuffled_run({"--resume", dir / "state.json", "--digest", dir / "b.txt"}));
    ASSERT_TRUE(second.status.is(0)) << second.status << both(second);
    EXPECT_EQ(resume::read_file(dir / "a.txt") + resume::read_file(dir / "b.txt"), expected);
  }
  std::cout << "[ measured ] a start of " << in_ms(start) << " from the handler to the announcement\n";
}

TEST(FerryResume, RefusesAStateSavedUnderAnotherOrderNamingTheKey) {
  const TempDir dir;
  const Result first = ferry(resume::shuffled_run({"--batches", "5", "--save-state", dir / "state.json"}));
  ASSERT_TRUE(first.status.is(0)) << both(first);
  const Result other = ferry(resume::shuffled_run({"--resume", dir / "state.json", "--set", "sampler.seed=12"}));
  EXPECT_TRUE(other.status.is(2)) << other.status << both(other);
  EXPECT_TRUE(contains(other.err,
                       "--set sampler.seed=12: sampler.seed: the saved state comes from a run with '11', "
                       "this config has '12'"))
      << both(other);
  std::ofstream(dir / "junk.json") << "{\"format\": \"something-else\"}";
  const Result junk = ferry(resume::shuffled_run({"--resume", dir / "junk.json"}));
  EXPECT_TRUE(junk.status.is(2)) << junk.status << both(junk);
  EXPECT_TRUE(contains(junk.err, "not a saved pipeline state")) << both(junk);
}

// Hand-edited states: each key is checked, and the refusal (exit 2) names the file and the key.
TEST(FerryResume, RefusesAnEditedStateNamingTheFileAndTheKey) {
  const TempDir dir;
  const std::string saved = dir / "state.json";
  const Result first = ferry(resume::shuffled_run({"--batches", "5", "--save-state", saved}));
  ASSERT_TRUE(first.status.is(0)) << both(first);
  const std::string text = resume::read_file(saved);
  // Each edit replaces the first match of a pattern in the saved text; the refusal must hold both parts.
  const auto edited = [&](const std::string& pattern, const std::string& replacement) {
    const std::string changed =
        std::regex_replace(text, std::regex(pattern), replacement, std::regex_constants::format_first_only);
    EXPECT_NE(changed, text) << pattern << " not in " << text;
    std::ofstream(dir / "edited.json") << changed;
    return ferry(resume::shuffled_run({"--resume", dir / "edited.json"}));
  };
  struct Case {
    std::string pattern, replacement, where, what;
  };
  const Case cases[] = {
      {"\"epoch\": 0, ", "", "edited.json:", "next.epoch: missing"},
      {"\"epoch\": 0, ", "\"epoch\": 99, ", "edited.json: ", "next.epoch: 99 is beyond"},
      {"\"position\": [0-9]+", "\"position\": 1", "edited.json: ", "next.position: 1 does not fit next.batch 5"},
      {"\"position\": [0-9]+", "\"position\": 9223372036854775808",
       "edited.json: ", "next.position: 9223372036854775808 is past"},
      {"\"next_batch\": [0-9]+", "\"next_batch\": 6", "edited.json: ", "next_batch: 6 does not fit next"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pattern + " -> " + c.replacement);
    const Result resumed = edited(c.pattern, c.replacement);
    EXPECT_TRUE(resumed.status.is(2)) << resumed.status << both(resumed);
    EXPECT_TRUE(contains(resumed.err, c.where) && contains(resumed.err, c.what)) << both(resumed);
  }
}
}  // namespace
}  // namespace ferry
