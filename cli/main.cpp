// ferry: the command line. `ferry run` runs the demo pipeline (synthetic data, to the GPU when
// there is one) and prints progress and a report; `ferry info` tells what this build can do.
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <oneapi/tbb/version.h>

#include "cli/demo_source.h"
#include "ferry/build_config.h"
#include "cli/progress_line.h"
#include "cli/run_report.h"
#include "io/batch_planner.h"
#include "io/sequential_sampler.h"
#include "pipeline/cuda_device.h"
#include "pipeline/error.h"
#include "stages/standard_pipeline.h"

namespace {

constexpr int kUsageError = 2;

constexpr const char* kUsage =
    "usage: ferry run [--batches N] [--epochs N] [--batch-size N] [--device auto|cpu|cuda|cuda:N]\n"
    "                 [--decode-threads N] [--prefetch N]\n"
    "       ferry info\n"
    "\n"
    "  run   run the built-in demo pipeline (synthetic images, labels and token sequences)\n"
    "        and print progress and a report\n"
    "  info  print what this build of ferry supports\n";

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

volatile std::sig_atomic_t g_interrupted = 0;

int run(const std::vector<std::string_view>& args) {
  ferry::PipelineOptions options;
  options.batch_size = 64;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view flag = args[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= args.size()) throw UsageError(std::string(flag) + " needs a value");
      return args[++i];
    };
    if (flag == "--batches") {
      options.max_batches = parse_count(flag, value());
    } else if (flag == "--epochs") {
      options.epochs = parse_count(flag, value());
    } else if (flag == "--batch-size") {
      options.batch_size = parse_count(flag, value());
    } else if (flag == "--device") {
      options.device = std::string(value());
    } else if (flag == "--decode-threads") {
      options.decode_threads = parse_count(flag, value());
    } else if (flag == "--prefetch") {
      options.prefetch = parse_count(flag, value());
    } else {
      throw UsageError("unknown option '" + std::string(flag) + "'");
    }
  }

  auto source = std::make_shared<ferry::SyntheticSource>(ferry::cli::demo_source_options());
  ferry::Pipeline pipeline = ferry::make_pipeline(source, options);
  const uint64_t total = ferry::BatchPlanner(std::make_shared<ferry::SequentialSampler>(source->size()),
                                             {options.batch_size, options.drop_last, options.epochs, options.max_batches})
                             .total_batches();
  std::signal(SIGINT, [](int) { g_interrupted = 1; });
  std::fprintf(stderr, "ferry: demo pipeline over %s, %llu batches of %zu to %s (%s)\n", source->describe().c_str(),
               static_cast<unsigned long long>(total), options.batch_size, pipeline.options().device.c_str(),
               ferry::build_description().c_str());

  ferry::cli::ProgressLine progress(stderr, total);
  for (const ferry::Batch& batch : pipeline) {
    (void)batch;
    progress.update(pipeline.stats());
    if (g_interrupted != 0) {
      std::fprintf(stderr, "\nferry: interrupted; stopping\n");
      pipeline.close();
      break;
    }
  }
  const ferry::PipelineStats stats = pipeline.stats();
  progress.finish(stats);
  ferry::cli::print_report(stdout, "ferry run: demo", stats);
  return g_interrupted != 0 ? 130 : 0;
}

int info() {
  std::printf("ferry %s\n", FERRY_VERSION);
  std::printf("  build        %s\n", ferry::build_description().c_str());
  std::printf("  libtorch     %s\n", FERRY_TORCH_VERSION);
  std::printf("  oneTBB       %s\n", TBB_VERSION_STRING);
  const int devices = ferry::cuda_device_count();
  if (devices == 0) {
    std::printf("  devices      %s\n", ferry::cuda_unavailable_reason().c_str());
  } else {
    std::printf("  devices      %d CUDA device%s\n", devices, devices == 1 ? "" : "s");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  try {
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      std::fputs(kUsage, args.empty() ? stderr : stdout);
      return args.empty() ? kUsageError : 0;
    }
    const std::vector<std::string_view> rest(args.begin() + 1, args.end());
    if (args[0] == "run") return run(rest);
    if (args[0] == "info") return info();
    throw UsageError("unknown command '" + std::string(args[0]) + "'");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ferry: %s\n%s", e.what(), kUsage);
    return kUsageError;
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
