// ferry: the command line.
//   ferry run [CONFIG] [--set k=v]... [--batches N] [--epochs N] [--report PATH] [--trace PATH]
//   ferry validate CONFIG [--set k=v]...
//   ferry info [--bandwidth] [--keys]
//   ferry make-dataset tokens|tar|npy|images OUT [options]   (cli/make_dataset.h)
//   ferry --version, ferry --help, ferry COMMAND --help
// Every command also takes --plugin PATH (repeatable, before or after the command): a plugin to load first.
// Exit status: 0 done, 1 the run failed, 2 bad usage or an invalid config, 130 interrupted (Ctrl-C),
// 143 terminated (SIGTERM).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <unistd.h>

#include <oneapi/tbb/version.h>

#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/config_schema.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/assembly/configured_planner.h>
#include <ferry/assembly/pipeline_state_loader.h>
#include <ferry/assembly/plugin.h>
#include <ferry/assembly/run_report.h>
#include <ferry/build_config.h>
#include <ferry/io/util/units.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/error.h>
#include <ferry/pipeline/malloc_name.h>
#include <ferry/pipeline/thread_start.h>
#include "cli/batch_digest.h"
#include "cli/builtin_demo.h"
#include "cli/make_dataset.h"
#include "cli/output_files.h"
#include "cli/progress_line.h"

namespace {

constexpr int kFailed = 1;
constexpr int kUsageError = 2;
// 128 + the signal, as shells report it: 130 for SIGINT (Ctrl-C), 143 for SIGTERM.
constexpr int kSignalled = 128;

// Each command's usage: `ferry COMMAND --help` prints it; `ferry --help` prints them all.
constexpr const char* kRunUsage =
    "usage: ferry run [CONFIG] [--set key=value]... [--batches N] [--epochs N] [--report PATH]\n"
    "                 [--trace PATH] [--save-state PATH] [--resume PATH] [--digest PATH]\n"
    "\n"
    "Runs the pipeline CONFIG describes (default: the built-in configs/demo.yaml, synthetic data made on\n"
    "the fly), with progress on stderr and a report on stdout. Relative paths in CONFIG are relative to\n"
    "the current folder.\n"
    "  --set key.path=value  override any key (docs/config.md), e.g. --set transfer.device=cpu\n"
    "  --batches N           stop after N batches (--set max_batches=N)\n"
    "  --epochs N            passes over the data (--set sampler.epochs=N)\n"
    "  --report PATH         also write the report as JSON, docs/report.md (--set stats.report=PATH)\n"
    "  --trace PATH          write a timeline of the run for Perfetto or chrome://tracing (--set stats.trace=PATH)\n"
    "  --save-state PATH     at the end (also after Ctrl-C or a failure) save where the run stands\n"
    "  --resume PATH         start where a saved run stopped: the batches it had not delivered\n"
    "  --digest PATH         write a line per batch with a hash of its contents (for checking)\n"
    "  --plugin PATH         load a plugin (a shared library of source kinds, decoders, transforms) first\n";
constexpr const char* kValidateUsage =
    "usage: ferry validate CONFIG [--set key=value]... [--plugin PATH]...\n"
    "\n"
    "Checks CONFIG and the overrides without running it: every problem, with file:line:column, the key,\n"
    "what was expected and what was found. Exits 0 when it would run, 2 otherwise.\n";
constexpr const char* kInfoUsage =
    "usage: ferry info [--bandwidth] [--keys] [--plugin PATH]...\n"
    "\n"
    "What this build supports: the versions of ferry, libtorch, oneTBB and CUDA, the visible devices, and\n"
    "the source kinds, decoders and transforms a config can name (a loaded plugin's too).\n"
    "  --bandwidth           also measure each device's host-to-device link\n"
    "  --keys                print every source kind's, decoder's and transform's keys (Markdown)\n";
constexpr const char* kMakeDatasetUsage =
    "usage: ferry make-dataset tokens OUT [--documents N] [--seed S] [--vocab V] [--dtype uint16|int32]\n"
    "       ferry make-dataset tar OUT_DIR [--samples N] [--shards S] [--image-size N|HxW|imagenet] [--classes C] "
    "[--seed S] "
    "[--quality Q]\n"
    "       ferry make-dataset npy OUT_DIR [--samples N] [--shards S] [--classes C] [--seed S]\n"
    "       ferry make-dataset images OUT_DIR [--samples N] [--image-size N|HxW|imagenet] [--classes C] [--seed S] "
    "[--quality Q]\n"
    "\n"
    "Writes a small generated dataset to try ferry on: tokens = a Megatron-LM indexed dataset OUT.bin/.idx;\n"
    "tar = WebDataset shards OUT_DIR/shard-000000.tar... of <key>.jpg + <key>.cls; npy = the same with\n"
    "<key>.npy (float32 [64]); images = an ImageFolder OUT_DIR/class-000/000000.jpg... Defaults: 1000\n"
    "samples, 4 shards, 256x256, 10 classes, seed 0, quality 90; sample k has label k % classes;\n"
    "--image-size imagenet: the sizes of ImageNet's photos (mostly 500x375, some 3:2 or portrait). OUT_DIR\n"
    "must be new or empty, and OUT must not hold a dataset yet.\n";

struct Command {
  std::string_view name;
  const char* usage;
};
constexpr Command kCommands[] = {
    {"run", kRunUsage}, {"validate", kValidateUsage}, {"info", kInfoUsage}, {"make-dataset", kMakeDatasetUsage}};

constexpr const char* kExitStatus =
    "exit status: 0 done, 1 the run failed, 2 bad usage or invalid config, 130 interrupted (SIGINT),\n"
    "143 terminated (SIGTERM); either way with --save-state and --report written\n";

// `ferry --help`: every command's usage.
void print_usage(FILE* out) {
  std::fputs("ferry: staged data loading into GPU-resident batches\n\n", out);
  for (const Command& command : kCommands) std::fprintf(out, "%s\n", command.usage);
  std::fputs("ferry --version prints the version and the build; ferry COMMAND --help one command's usage.\n", out);
  std::fputs("ferry --plugin PATH COMMAND ... loads a plugin first (repeatable; also after the command).\n", out);
  std::fputs(kExitStatus, out);
}

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

uint64_t parse_count(std::string_view flag, std::string_view text) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw UsageError(std::string(flag) + ": expected a non-negative integer, found '" + std::string(text) + "'");
  }
  return value;
}

// What `run` and `validate` share: the config (a file or the built-in demo) with its overrides.
struct ConfigArgs {
  std::optional<std::string> path;
  std::vector<std::string> overrides;
  std::optional<std::string> save_state;
  std::optional<std::string> resume;
  std::optional<std::string> digest;
  bool report = false;  // --report given (it sets stats.report)
  bool trace = false;   // --trace given (it sets stats.trace)
};

// `text` as a YAML single-quoted scalar, read back exactly (a path may look like YAML: "null", "a: b").
std::string yaml_quoted(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted + "'";
}

ConfigArgs parse_config_args(const std::vector<std::string_view>& args, bool run_flags) {
  ConfigArgs parsed;
  std::vector<std::string_view> given;  // the options that take one value: twice is a mistake, not "the last wins"
  bool options_ended = false;           // after "--", every argument is a config's path
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view flag = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(std::string(flag) + " needs a value");
      return std::string(args[++i]);
    };
    const bool once = flag == "--batches" || flag == "--epochs" || flag == "--report" || flag == "--trace" ||
                      flag == "--save-state" || flag == "--resume" || flag == "--digest";
    if (!options_ended && run_flags && once) {
      if (std::find(given.begin(), given.end(), flag) != given.end()) {
        throw UsageError(std::string(flag) + " is given twice: give it once");
      }
      given.push_back(flag);
    }
    if (options_ended || flag.rfind("-", 0) != 0) {
      if (parsed.path) {
        throw UsageError("one config at a time; found '" + *parsed.path + "' and '" + std::string(flag) + "'");
      }
      parsed.path = std::string(flag);
    } else if (flag == "--") {
      options_ended = true;
    } else if (flag == "--set") {
      parsed.overrides.push_back(value());
    } else if (flag.rfind("--set=", 0) == 0) {
      parsed.overrides.emplace_back(flag.substr(6));
    } else if (run_flags && flag == "--batches") {
      // Shorthands for overrides, so that they are checked (and located) like any other.
      const uint64_t batches = parse_count(flag, value());
      if (batches == 0) throw UsageError("--batches: 0 batches would be no run; leave --batches out to run them all");
      parsed.overrides.push_back("max_batches=" + std::to_string(batches));
    } else if (run_flags && flag == "--epochs") {
      parsed.overrides.push_back("sampler.epochs=" + std::to_string(parse_count(flag, value())));
    } else if (run_flags && flag == "--report") {
      parsed.overrides.push_back("stats.report=" + yaml_quoted(value()));
      parsed.report = true;
    } else if (run_flags && flag == "--trace") {
      parsed.overrides.push_back("stats.trace=" + yaml_quoted(value()));
      parsed.trace = true;
    } else if (run_flags && flag == "--save-state") {
      parsed.save_state = value();
    } else if (run_flags && flag == "--resume") {
      parsed.resume = value();
    } else if (run_flags && flag == "--digest") {
      parsed.digest = value();
    } else if (flag == "--plugin") {
      ferry::load_plugin(value());
    } else if (flag.rfind("--plugin=", 0) == 0) {
      ferry::load_plugin(std::string(flag.substr(9)));
    } else {
      throw UsageError("unknown option '" + std::string(flag) + "'");
    }
  }
  return parsed;
}

ferry::Config load(const ConfigArgs& args) {
  if (args.path) return ferry::load_config(*args.path, args.overrides);
  return ferry::parse_config(ferry::cli::builtin_demo_yaml(), ferry::cli::kBuiltinDemoName, args.overrides);
}

// Fails before a run, not after it: what the run writes at its end (the state, the report) and as it
// goes (the digest) must be files it can write, and none may be what it reads or another of them.
void check_run_outputs(const ConfigArgs& parsed, const ferry::Config& config) {
  std::vector<ferry::cli::NamedFile> outputs;
  if (parsed.save_state) outputs.push_back({"--save-state", *parsed.save_state});
  if (!config.stats.report_path.empty()) {
    outputs.push_back({parsed.report ? "--report" : "stats.report", config.stats.report_path});
  }
  if (!config.pipeline.trace.empty()) {
    outputs.push_back({parsed.trace ? "--trace" : "stats.trace", config.pipeline.trace});
  }
  if (parsed.digest) outputs.push_back({"--digest", *parsed.digest});
  std::vector<ferry::cli::NamedFile> inputs;
  if (parsed.path) inputs.push_back({"the config", *parsed.path});
  for (const std::string& plugin : ferry::loaded_plugins()) inputs.push_back({"the plugin", plugin});
  // The source's paths (shards, a prefix, a root) as the config gave them.
  for (const auto& [key, value] : config.values) {
    if (key.rfind("source.", 0) == 0 && !value.empty()) inputs.push_back({key, value});
  }
  try {
    ferry::cli::check_outputs(outputs, inputs);
    // The state a run resumed from may be replaced by the one it saves (a preempted job going on, saving
    // where it stopped into the same file), by nothing else.
    if (parsed.resume) {
      std::vector<ferry::cli::NamedFile> others;
      for (const ferry::cli::NamedFile& output : outputs) {
        if (output.what != "--save-state") others.push_back(output);
      }
      ferry::cli::check_outputs(others, {{"--resume", *parsed.resume}});
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

// Ctrl-C and SIGTERM (what job schedulers send before they kill): the handler only records the
// signal (all it may do); a watcher thread closes the pipeline, which wakes a consumer blocked in
// next() — a slow source cannot delay the stop — and the state and report are written as usual.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

// How a run ended, for what it writes at the end.
struct RunEnd {
  int status = 0;
  int signal = 0;  // the signal that stopped it (0: none), as read when its loop ended
  std::optional<std::string> failure;
  std::vector<ferry::PipelineStats> device_stats;  // one per device; none when no pipeline was made
  std::vector<ferry::PipelineState> states;        // what --save-state saves
};

// What every run writes at its end, however it ended: the report (stdout, and --report) and the state
// (--save-state). Returns the exit status.
int finish_run(const ConfigArgs& parsed, const ferry::Config& config, const ferry::Source& source, RunEnd end) {
  const int signal = end.signal;
  const bool interrupted = signal != 0;
  if (interrupted) end.status = kSignalled + signal;
  const ferry::PipelineStats stats = ferry::merged_stats(end.device_stats);
  if (interrupted) {
    std::fprintf(stderr, "ferry: interrupted (%s)%s; stopped cleanly\n", signal == SIGTERM ? "SIGTERM" : "SIGINT",
                 end.device_stats.empty() ? " while starting, before any batch" : "");
  }
  if (end.failure) std::fprintf(stderr, "%s\n", end.failure->c_str());

  ferry::RunInfo info;
  info.ferry_version = FERRY_VERSION;
  info.config = config.origin;
  info.source = source.describe();
  info.device = ferry::requested_devices(config);
  info.interrupted = interrupted;
  info.started = !end.device_stats.empty();
  info.exit_status = end.status;
  info.host = ferry::this_host();
  info.config_keys = config.values;
  if (end.device_stats.size() > 1) info.devices = std::move(end.device_stats);
  if (end.failure) info.error = *end.failure;
  ferry::print_report(stdout, "ferry run: " + config.origin, info, stats);
  // A report that did not reach standard output (a full disk, /dev/full) fails the run; the state and
  // the JSON report are still written.
  int status = end.status;
  if (!ferry::cli::stdout_written("the report") && status == 0) status = kFailed;
  if (parsed.save_state) {
    // Whatever ended the run, the state names the first batch this run did not hand out.
    // Written beside and renamed over: a crash mid-write never loses the state a --resume came from.
    try {
      ferry::cli::write_file(*parsed.save_state, ferry::states_json(end.states));
      std::fprintf(stderr, "ferry: state saved to %s (next batch %llu)\n", parsed.save_state->c_str(),
                   static_cast<unsigned long long>(end.states.front().next_batch));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ferry: cannot save the state (--save-state): %s\n", e.what());
      if (status == 0) status = kFailed;
    }
  }
  if (!config.stats.report_path.empty()) {
    std::ostringstream json;
    ferry::write_report_json(json, info, stats);
    try {
      ferry::cli::write_file(config.stats.report_path, json.str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ferry: cannot write the report: %s\n", e.what());
      return status == 0 ? kFailed : status;
    }
    std::fprintf(stderr, "ferry: report written to %s\n", config.stats.report_path.c_str());
  }
  return status;
}

// Note [a signal while starting]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Making the pipeline can take over a second on a GPU machine (CUDA's start, pinning the staging
// slabs at 2-2.5 GB/s, the GPU decoder's states), and on a loaded one more: the GPU test of signals at
// random moments saw a stop take longer than a second. Nothing can interrupt those calls. So the group
// is made on a thread of its own while this one waits for it or for a signal, whichever comes first. A
// signal first: nothing has been delivered, so the run writes what any interrupted run writes, the
// report, an empty digest and the state (where it started: starting_states()), and the process ends
// (std::_Exit) without waiting for the start, whose error, if it would have failed, goes unsaid: the run
// exits with 128 + the signal. A start that fails before any signal surfaces its error as before. What
// is still waited for: check_config() on this thread, where a GPU build first asks CUDA for its
// devices (the driver's start), and the exit itself, which may wait for the maker thread's call into
// the driver to return (on an H100, a signal in the middle of pinning 3 GiB still stopped the run within
// a second).
std::optional<ferry::PipelineGroup> make_unless_signalled(const ferry::Config& config,
                                                          const std::shared_ptr<const ferry::Source>& source,
                                                          const std::vector<ferry::PipelineState>& resume) {
  if (g_signal.load() != 0) return std::nullopt;  // came while the config was read: nothing to start
  // Owned by the task: the thread may outlive this call (a signal came first).
  auto make = std::make_shared<std::packaged_task<ferry::PipelineGroup()>>(
      [config, source, resume] { return ferry::make_pipeline_group(config, source, resume); });
  std::future<ferry::PipelineGroup> made = make->get_future();
  std::thread maker = ferry::detail::start_thread("a thread to make the pipeline", [make] { (*make)(); });
  while (made.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
    if (g_signal.load() != 0) {
      maker.detach();
      return std::nullopt;
    }
  }
  maker.join();
  return made.get();  // rethrows what making it threw
}

int run(const std::vector<std::string_view>& args) {
  // From the start: a Ctrl-C while the pipeline starts up still ends in a clean stop and a report.
  for (const int signal : {SIGINT, SIGTERM}) std::signal(signal, [](int received) { g_signal.store(received); });
  // `ferry run ... | head` closes stdout early: the writes fail instead, and --report is still written.
  std::signal(SIGPIPE, SIG_IGN);
  const ConfigArgs parsed = parse_config_args(args, /*run_flags=*/true);
  const ferry::Config config = load(parsed);
  std::vector<ferry::PipelineState> resume;  // one state per device (a group's), or none
  if (parsed.resume) resume = ferry::load_pipeline_states(*parsed.resume);
  check_run_outputs(parsed, config);

  const std::shared_ptr<const ferry::Source> source = ferry::check_config(config);  // indexed once
  // Before the pipeline: a digest that cannot be written fails the run before CUDA starts, and a run
  // stopped while starting leaves an empty digest, not an earlier run's. A pipeline's first batch is
  // its resume point (the same on every device of a group).
  std::optional<ferry::cli::BatchDigest> digest;
  if (parsed.digest) digest.emplace(*parsed.digest, resume.empty() ? 0 : resume.front().next_batch);
  // One pipeline, or one per device of transfer.devices (Note [one process, several devices]).
  std::optional<ferry::PipelineGroup> made = make_unless_signalled(config, source, resume);
  if (!made) {  // Note [a signal while starting]: whatever happens here, the process ends here
    RunEnd end;
    end.signal = g_signal.load();
    int status = kSignalled + end.signal;
    try {
      if (digest) digest->finish();
      end.states = ferry::starting_states(config, *source, resume);
      status = finish_run(parsed, config, *source, std::move(end));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ferry: %s\n", e.what());
    }
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(status);
  }
  ferry::PipelineGroup& pipeline = *made;
  const ferry::EngineOptions& options = pipeline.pipeline(0).options();
  const uint64_t total = ferry::planner_of(config, options, *source, 0).total_batches();
  std::string devices = options.device;
  for (size_t d = 1; d < pipeline.size(); ++d) devices += ", " + pipeline.pipeline(d).options().device;
  std::fprintf(stderr, "ferry: %s: %s, %llu %s of %zu to %s (%s)\n", config.origin.c_str(), source->describe().c_str(),
               static_cast<unsigned long long>(total), pipeline.size() == 1 ? "batches" : "steps of a batch",
               options.batch_size, devices.c_str(), ferry::build_description().c_str());
  if (!resume.empty()) {
    std::fprintf(stderr, "ferry: resuming %s at batch %llu of the run\n", parsed.resume->c_str(),
                 static_cast<unsigned long long>(options.first_batch));
  }
  if (digest) digest->set_first_batch(options.first_batch);

  std::atomic<bool> done{false};
  std::thread watcher = ferry::detail::start_thread("the thread that watches for Ctrl-C", [&] {
    while (!done.load()) {
      if (g_signal.load() != 0) {
        pipeline.close();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  struct JoinWatcher {
    std::atomic<bool>& done;
    std::thread& watcher;
    ~JoinWatcher() {
      done.store(true);
      watcher.join();
    }
  } join_watcher{done, watcher};

  // Progress counts batches, every device's.
  ferry::cli::ProgressLine progress(stderr, total * pipeline.size(), config.stats.progress, config.stats.interval);
  RunEnd end;
  try {
    for (const ferry::BatchGroup& step : pipeline) {
      if (digest) {
        for (const ferry::Batch& batch : step) digest->add(batch);
      }
      progress.update(ferry::merged_stats(pipeline.stats()));
    }
    if (digest) digest->finish();
  } catch (const std::exception& e) {
    // Whatever failed (a stage, the digest, memory), the report and the state are still written.
    end.failure = e.what();
    end.status = kFailed;
    pipeline.close();
  }
  end.signal = g_signal.load();
  end.device_stats = pipeline.stats();
  progress.finish(ferry::merged_stats(end.device_stats));
  end.states = pipeline.state();
  return finish_run(parsed, config, *source, std::move(end));
}

int validate(const std::vector<std::string_view>& args) {
  const ConfigArgs parsed = parse_config_args(args, /*run_flags=*/false);
  if (!parsed.path) throw UsageError("validate needs a CONFIG file");
  const ferry::Config config = load(parsed);
  const std::shared_ptr<const ferry::Source> source = ferry::check_config(config);
  const ferry::PipelineOptions& options = config.pipeline;
  const std::string devices = ferry::requested_devices(config);  // a list of several, or the one
  std::printf("%s: valid (%s, batches of %zu, %llu epoch%s, %s %s)\n", config.origin.c_str(),
              source->describe().c_str(), options.batch_size, static_cast<unsigned long long>(options.epochs),
              options.epochs == 1 ? "" : "s", config.devices.empty() ? "device" : "devices", devices.c_str());
  return 0;
}

// The source kinds, decoders and transforms a config can name, by name, each plugin's marked.
void print_extensions() {
  const auto names = [](const auto& kinds) {
    std::string text;
    for (const auto& kind : kinds) {
      text += (text.empty() ? "" : ", ") + kind->name;
      if (!kind->origin.empty()) text += " (" + kind->origin + ")";
    }
    return text;
  };
  std::printf("  source kinds  %s\n", names(ferry::SourceRegistry::global().kinds()).c_str());
  std::printf("  decoders      %s\n", names(ferry::DecoderRegistry::global().kinds()).c_str());
  std::printf("  transforms    %s\n", names(ferry::TransformRegistry::global().kinds()).c_str());
  const std::vector<std::string> plugins = ferry::loaded_plugins();
  std::string loaded;
  for (const std::string& plugin : plugins) loaded += (loaded.empty() ? "" : ", ") + plugin;
  std::printf("  plugins       %s\n", plugins.empty() ? "none loaded (--plugin PATH)" : loaded.c_str());
  std::printf("  (ferry info --keys prints their keys)\n");
}

int info(const std::vector<std::string_view>& args) {
  bool bandwidth = false;
  bool keys = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--keys") {
      keys = true;
      continue;
    }
    if (arg == "--plugin") {
      if (i + 1 >= args.size()) throw UsageError("--plugin needs a value");
      ferry::load_plugin(std::string(args[++i]));
      continue;
    }
    if (arg != "--bandwidth") throw UsageError("unknown option '" + std::string(arg) + "'");
    bandwidth = true;
  }
  if (keys) {
    std::fputs(ferry::extension_keys_markdown().c_str(), stdout);
    return 0;
  }
  std::printf("ferry %s\n", FERRY_VERSION);
  std::printf("  build         %s\n", ferry::build_description().c_str());
  std::printf("  libtorch      %s\n", FERRY_TORCH_VERSION);
  std::printf("  oneTBB        %s\n", TBB_VERSION_STRING);
  std::printf("  malloc        %s\n", ferry::malloc_name().c_str());
  std::printf("  CUDA runtime  %s\n", ferry::cuda_runtime_version().c_str());
  std::printf("  CUDA driver   %s\n", ferry::cuda_driver_version().c_str());
  std::printf("  nvjpeg: %s\n", FERRY_NVJPEG ? "yes (jpeg device: gpu and auto decode on the GPU)"
                                             : ("no: " + std::string(FERRY_NVJPEG_REASON)).c_str());
  print_extensions();
  const std::vector<ferry::CudaDeviceInfo> devices = ferry::cuda_devices(/*free_memory=*/true);
  if (devices.empty()) {
    std::printf("  devices       %s\n", ferry::cuda_unavailable_reason().c_str());
    return 0;
  }
  std::printf("  devices       %zu visible\n", devices.size());
  for (const ferry::CudaDeviceInfo& device : devices) {
    std::printf("    cuda:%d  %s, compute %d.%d, %s total, %s free, PCI %s", device.index, device.name.c_str(),
                device.major, device.minor, ferry::format_byte_size(device.total_bytes).c_str(),
                ferry::format_byte_size(device.free_bytes).c_str(), device.pci_bus_id.c_str());
    if (bandwidth) {
      try {
        std::printf(", host-to-device %.1f GB/s (pinned, 256 MiB)",
                    ferry::measure_h2d_bandwidth(device.index, size_t{256} << 20));
      } catch (const ferry::Error& e) {
        std::printf(", bandwidth not measured: %s", e.what());
      }
    }
    std::printf("\n");
  }
  if (!bandwidth) std::printf("  (ferry info --bandwidth measures each device's host-to-device link)\n");
  return 0;
}

}  // namespace

namespace {

int dispatch(std::vector<std::string_view> args) {
  const Command* command = nullptr;
  try {
    // --plugin PATH before the command: loaded before anything else.
    while (!args.empty() && (args[0] == "--plugin" || args[0].rfind("--plugin=", 0) == 0)) {
      if (args[0] == "--plugin") {
        if (args.size() < 2) throw UsageError("--plugin needs a value");
        ferry::load_plugin(std::string(args[1]));
        args.erase(args.begin(), args.begin() + 2);
      } else {
        ferry::load_plugin(std::string(args[0].substr(9)));
        args.erase(args.begin());
      }
    }
    if (args.empty()) {
      print_usage(stderr);
      return kUsageError;
    }
    if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      print_usage(stdout);
      return 0;
    }
    if (args[0] == "--version" || args[0] == "version") {
      if (args.size() > 1) throw UsageError("version takes no arguments; found '" + std::string(args[1]) + "'");
      std::printf("ferry %s (%s build; libtorch %s; nvjpeg: %s)\n", FERRY_VERSION, FERRY_BUILD_KIND,
                  FERRY_TORCH_VERSION, FERRY_NVJPEG ? "yes" : "no");
      return 0;
    }
    for (const Command& known : kCommands) {
      if (known.name == args[0]) command = &known;
    }
    if (command == nullptr) {
      throw UsageError("unknown command '" + std::string(args[0]) + "' (commands: run, validate, info, make-dataset)");
    }
    const std::vector<std::string_view> rest(args.begin() + 1, args.end());
    for (const std::string_view arg : rest) {
      if (arg == "--help" || arg == "-h") {
        std::fputs(command->usage, stdout);
        return 0;
      }
    }
    if (command->name == "run") return run(rest);
    if (command->name == "validate") return validate(rest);
    if (command->name == "info") return info(rest);
    try {
      return ferry::cli::make_dataset(rest);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  } catch (const UsageError& e) {
    // The one line that matters, and where the rest is.
    std::fprintf(stderr, "ferry: %s\n", e.what());
    std::fprintf(stderr, "run 'ferry %s--help' for %s\n", command ? (std::string(command->name) + " ").c_str() : "",
                 command ? "its usage" : "the commands and their usage");
    return kUsageError;
  } catch (const ferry::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kUsageError;
  } catch (const ferry::PluginError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kUsageError;
  } catch (const std::exception& e) {  // ferry::Error, and anything else (out of memory, libtorch)
    std::fprintf(stderr, "%s\n", e.what());
    return kFailed;
  }
}

// Note [a thread that cannot be made]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The pipeline makes sure its worker threads can exist before it starts
// (detail::check_threads_can_start), but oneTBB makes them later, one from another, and where memory
// has run short by then a worker's pthread_create fails inside oneTBB, which can only end the process.
// Rather than "terminate called ..." and SIGABRT, say what happened and what to change, and exit 1 as
// any failed run does.
[[noreturn]] void on_terminate() {
  std::string what = "an error no code could catch";
  if (const std::exception_ptr failure = std::current_exception()) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
  }
  const bool thread = what.find("pthread_create") != std::string::npos;
  std::fprintf(stderr, "ferry: %s%s\n", what.c_str(), thread ? ferry::detail::thread_limit_advice().c_str() : "");
  std::fflush(stderr);
  std::_Exit(kFailed);
}

}  // namespace

int main(int argc, char** argv) {
  std::set_terminate(on_terminate);
  const int status = dispatch(std::vector<std::string_view>(argv + 1, argv + argc));
  // What a command printed and could not write (a full disk, /dev/full, a closed pipe) is an error.
  if (!ferry::cli::stdout_written("its output") && status == 0) return kFailed;
  return status;
}
