// ferry_soak: random pipelines back to back, every byte of every batch checked, a watchdog for stalls.
//
// Each round draws a dataset (1 to 5 fields of nine dtypes, fixed and variable lengths, samples that
// fail to read or decode), an order (sequential, shuffled, shard shuffle; one rank of up to five),
// batch options (size, drop_last, epochs, max_batches, on_error fail or skip), thread counts,
// prefetch, transfer and pool settings, a dataset cache, and stop points where the run saves its
// state, is torn down and goes on in a new pipeline (built from the state, through its JSON or
// not, with other threads and prefetch). It builds the pipelines through ferry's public API (a
// Config and make_pipeline(config, source, state), or PipelineOptions and the stages) and checks
// every delivered batch against an expectation computed without ferry's planner, cutter, collate
// or pack (soak_model.h, the source's bytes): order, epoch and index, every byte of every field,
// padding, lengths; the error that ends a run under on_error: fail (its sample, epoch and batch);
// the skipped samples under skip (which, in which order, how many); the state a resume starts from.
//
//   ferry_soak [--batches N] [--seconds S] [--seed N|random] [--device auto|cpu|cuda|cuda:N]
//              [--stall-seconds S] [--json PATH] [--round K] [--ferry-stderr] [--self-test-stall]
//
// Exit 0 only when every check passed and nothing stalled; 1 on a failed check; 3 on a stall
// (after every thread's stack); 2 on bad usage.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <ferry/assembly/config.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/assembly/pipeline_state_loader.h>
#include <ferry/io/samplers/sequential_sampler.h>
#include <ferry/io/samplers/shard_shuffle_sampler.h>
#include <ferry/io/samplers/sharded_sampler.h>
#include <ferry/io/samplers/shuffled_sampler.h>
#include <ferry/io/util/units.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/error.h>
#include <ferry/pipeline/pipeline.h>
#include <ferry/stages/standard_pipeline.h>
#include <ferry/stages/standard_stages.h>
#include "tests/stress/soak/soak_model.h"
#include "tests/stress/soak/soak_source.h"
#include "tests/stress/soak/watchdog.h"

namespace ferry::soak {
namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Output: ours on stdout, one writer at a time; ferry's own stderr lines (a line per skipped
// sample) go to a log file that is emptied every round and shown when a round fails.

std::mutex say_mutex;

void say(const std::string& text) {
  std::lock_guard lock(say_mutex);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t wrote = ::write(1, text.data() + done, text.size() - done);
    if (wrote <= 0) break;
    done += static_cast<size_t>(wrote);
  }
}

struct FerryLog {
  std::string path;  // "" : ferry's stderr is left alone
  void open() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ferry-soak-" + std::to_string(::getpid()) +
           ".stderr";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (fd < 0 || ::dup2(fd, 2) < 0) {
      path.clear();
      return;
    }
    ::close(fd);
  }
  void clear() const {
    // A failed truncation only leaves older messages in the file: nothing to do about it here.
    if (!path.empty() && ::ftruncate(2, 0) != 0) return;
  }
  std::string tail(size_t bytes = 3000) const {
    if (path.empty()) return "";
    std::string text;
    if (FILE* file = std::fopen(path.c_str(), "r")) {
      char buffer[4096];
      size_t got = 0;
      while ((got = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, got);
      std::fclose(file);
    }
    return text.size() > bytes ? "..." + text.substr(text.size() - bytes) : text;
  }
  void remove() const {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

// ---------------------------------------------------------------------------------------------
// Counters, shared with the progress lines and the summary.

struct Counters {
  std::atomic<uint64_t> rounds{0};
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> samples{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> mismatches{0};
  std::atomic<uint64_t> stalls{0};
  std::atomic<uint64_t> errors_expected{0};  // on_error: fail runs that ended with the right error
  std::atomic<uint64_t> skipped_counted{0};  // skipped samples checked against the expectation
  std::atomic<uint64_t> resumes{0};
  std::atomic<uint64_t> pipelines{0};
  // What the configs drawn were (each round counts once in each line that applies).
  std::atomic<uint64_t> on_error_fail{0};
  std::atomic<uint64_t> skip_refill{0};
  std::atomic<uint64_t> skip_replace{0};
  std::atomic<uint64_t> with_faults{0};
  std::atomic<uint64_t> with_stops{0};
  std::atomic<uint64_t> several_ranks{0};
  std::atomic<uint64_t> shuffled{0};
  std::atomic<uint64_t> with_cache{0};
  std::atomic<uint64_t> via_config{0};
  std::atomic<uint64_t> endless_epochs{0};       // epochs = 2^20..2^40, ended by max_batches
  std::atomic<uint64_t> epoch_without_batch{0};  // ended by the error for an epoch that made no batch
};

Counters counters;
Watchdog* watchdog = nullptr;
const auto started = Clock::now();

double seconds_since_start() { return std::chrono::duration<double>(Clock::now() - started).count(); }

void moved() {
  if (watchdog != nullptr) watchdog->progress();
}

// Resident memory and threads of this process, for the progress lines: a leak shows as growth.
double resident_mb() {
  long pages = 0;
  if (FILE* file = std::fopen("/proc/self/statm", "r")) {
    long size = 0;
    if (std::fscanf(file, "%ld %ld", &size, &pages) != 2) pages = 0;
    std::fclose(file);
  }
  return static_cast<double>(pages) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / 1e6;
}

size_t thread_count() {
  size_t count = 0;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (const dirent* entry = ::readdir(dir)) count += entry->d_name[0] != '.';
    ::closedir(dir);
  }
  return count;
}

std::string progress_line() {
  const double seconds = seconds_since_start();
  const uint64_t batches = counters.batches.load();
  char text[512];
  std::snprintf(text, sizeof text,
                "soak: %.0f s, %llu configs, %llu batches (%.0f/s), %s checked, %llu mismatches, %llu stalls, "
                "%llu errors as expected, %llu skipped and counted, %llu resumes; RSS %.0f MB, %zu threads\n",
                seconds, static_cast<unsigned long long>(counters.rounds.load()),
                static_cast<unsigned long long>(batches), seconds > 0 ? static_cast<double>(batches) / seconds : 0.0,
                format_decimal_bytes(static_cast<double>(counters.bytes.load())).c_str(),
                static_cast<unsigned long long>(counters.mismatches.load()),
                static_cast<unsigned long long>(counters.stalls.load()),
                static_cast<unsigned long long>(counters.errors_expected.load()),
                static_cast<unsigned long long>(counters.skipped_counted.load()),
                static_cast<unsigned long long>(counters.resumes.load()), resident_mb(), thread_count());
  return text;
}

// ---------------------------------------------------------------------------------------------
// Settings from the command line.

struct Settings {
  uint64_t batches = 0;  // 0: no limit
  double seconds = 0;    // 0: no limit
  uint64_t seed = 1;
  bool seed_drawn = false;
  double stall_seconds = 30;
  double progress_seconds = 5;
  std::string json;
  std::string device;  // resolved: "cpu" or "cuda:N"
  std::optional<uint64_t> only_round;
  bool ferry_stderr = false;
  bool self_test_stall = false;
  uint64_t max_failures = 10;
};

[[noreturn]] void usage(const std::string& problem) {
  if (!problem.empty()) std::fprintf(stderr, "ferry_soak: %s\n", problem.c_str());
  std::fprintf(stderr,
               "usage: ferry_soak [--batches N] [--seconds S] [--seed N|random] [--device auto|cpu|cuda|cuda:N]\n"
               "                  [--stall-seconds S] [--progress-seconds S] [--json PATH] [--round K]\n"
               "                  [--max-failures N] [--ferry-stderr] [--self-test-stall]\n"
               "Random pipelines back to back until N checked batches or S seconds (60 s when neither is given),\n"
               "every byte of every batch checked; fails on a mismatch, and with every thread's stack when\n"
               "nothing moves for --stall-seconds (30). --round K runs only round K of the seed (to repeat a\n"
               "failure). --self-test-stall runs a pipeline that never delivers, to see the watchdog fire.\n");
  std::exit(2);
}

Settings parse_settings(int argc, char** argv) {
  Settings settings;
  std::string device = "auto";
  const auto number = [&](int& i, const char* name) -> std::string {
    if (i + 1 >= argc) usage(std::string(name) + " needs a value");
    return argv[++i];
  };
  const auto whole = [](const std::string& text, const char* name) -> uint64_t {
    try {
      size_t used = 0;
      const unsigned long long value = std::stoull(text, &used);
      if (used == text.size() && text[0] != '-') return value;
    } catch (const std::exception&) {
    }
    usage(std::string(name) + ": expected a whole number, found '" + text + "'");
  };
  const auto real = [](const std::string& text, const char* name) -> double {
    try {
      size_t used = 0;
      const double value = std::stod(text, &used);
      if (used == text.size() && value >= 0) return value;
    } catch (const std::exception&) {
    }
    usage(std::string(name) + ": expected a number of seconds, found '" + text + "'");
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--batches") {
      settings.batches = whole(number(i, "--batches"), "--batches");
    } else if (arg == "--seconds") {
      settings.seconds = real(number(i, "--seconds"), "--seconds");
    } else if (arg == "--seed") {
      const std::string value = number(i, "--seed");
      if (value == "random") {
        std::random_device entropy;
        settings.seed = (static_cast<uint64_t>(entropy()) << 32 | entropy()) % 1000000000000ULL;
        settings.seed_drawn = true;
      } else {
        settings.seed = whole(value, "--seed");
      }
    } else if (arg == "--device") {
      device = number(i, "--device");
    } else if (arg == "--stall-seconds") {
      settings.stall_seconds = real(number(i, "--stall-seconds"), "--stall-seconds");
      if (settings.stall_seconds < 1) usage("--stall-seconds: at least 1");
    } else if (arg == "--progress-seconds") {
      settings.progress_seconds = real(number(i, "--progress-seconds"), "--progress-seconds");
    } else if (arg == "--json") {
      settings.json = number(i, "--json");
    } else if (arg == "--round") {
      settings.only_round = whole(number(i, "--round"), "--round");
    } else if (arg == "--max-failures") {
      settings.max_failures = whole(number(i, "--max-failures"), "--max-failures");
    } else if (arg == "--ferry-stderr") {
      settings.ferry_stderr = true;
    } else if (arg == "--self-test-stall") {
      settings.self_test_stall = true;
    } else if (arg == "--help" || arg == "-h") {
      usage("");
    } else {
      usage("unknown option '" + arg + "'");
    }
  }
  if (settings.batches == 0 && settings.seconds == 0 && !settings.only_round) settings.seconds = 60;
  // auto: the first GPU when libtorch and this build can use one, else the CPU.
  if (device == "auto") device = gpu_build() && torch::cuda::is_available() ? "cuda:0" : "cpu";
  try {
    settings.device = resolve_device(device).str();
  } catch (const Error& e) {
    usage(std::string("--device: ") + e.what());
  }
  return settings;
}

// ---------------------------------------------------------------------------------------------
// A round: everything drawn for one config.

enum class OrderKind { kSequential, kShuffled, kShardShuffle };
enum class Consumer { kNext, kNextFor, kIterator, kAnyThread };
// How a segment stops: close() then destroy; destroy; wait while it fills up, then destroy; close()
// from another thread at a random moment (the stop comes when it comes); keep it running beside the
// next pipeline until that one delivers.
enum class StopStyle { kClose, kDestroy, kLetItFill, kCloseFromThread, kOverlap };

struct Segment {
  size_t decode_threads = 1;
  size_t prefetch = 1;
  size_t slab_count = 0;
  std::chrono::microseconds max_delay{0};
  Consumer consumer = Consumer::kNext;
  std::chrono::microseconds next_timeout{0};
  StopStyle stop = StopStyle::kClose;
  bool state_through_json = false;
  size_t hold = 0;           // the consumer keeps its last `hold` batches and checks each again when it lets go of it
  bool watch_stats = false;  // another thread takes stats() and state() all along
};

struct Round {
  uint64_t number = 0;
  uint64_t seed = 0;
  SoakData data;
  OrderKind order = OrderKind::kSequential;
  uint64_t order_seed = 0;
  std::vector<uint64_t> shard_sizes;
  size_t shuffle_buffer = 1;
  uint64_t rank = 0;
  uint64_t world_size = 1;
  bool drop_remainder = false;
  bool sharded_sampler_for_one_rank = false;  // options path: a ShardedSampler even for one rank
  bool via_config = true;
  PipelineOptions options;      // per-segment parts (threads, prefetch, slab count) come from Segment
  std::vector<uint64_t> stops;  // one per stop (after which batch: drawn against the expected run)
  std::vector<Segment> segments;
  // A managed cache moves to the host after this many batches of a segment and back after as many
  // again (Pipeline::cache_to); 0: it stays.
  uint64_t cache_move_after = 0;

  SkipMode mode() const {
    if (options.on_error == OnError::kFail) return SkipMode::kFail;
    // The Config path sets skip_replaces for several ranks (resolve_pipeline_options); the
    // PipelineOptions path takes it as given.
    return options.skip_replaces || (via_config && world_size > 1) ? SkipMode::kReplace : SkipMode::kRefill;
  }
  std::string describe() const;
};

uint64_t mix_seed(uint64_t seed, uint64_t round) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ULL + round + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string Round::describe() const {
  std::ostringstream out;
  out << "round " << number << " (" << data.samples << " samples, seed " << data.seed << "): fields";
  for (const SoakField& field : data.fields) {
    out << " " << field.name << ":" << dtype_text(field.dtype);
    if (field.variable) {
      out << "[" << field.min_length << ".." << field.max_length << (field.max_length_known ? "" : " (max unknown)")
          << "]";
    }
    out << "[";
    for (size_t d = 0; d < field.shape.size(); ++d) out << (d ? "," : "") << field.shape[d];
    out << "]";
  }
  if (data.typed_fixed) out << " (fixed fields typed)";
  out << "; batch " << options.batch_size << ", epochs " << options.epochs;
  if (options.drop_last) out << ", drop_last";
  if (options.max_batches != 0) out << ", max_batches " << options.max_batches;
  out << "; order "
      << (order == OrderKind::kSequential ? "sequential"
          : order == OrderKind::kShuffled
              ? "shuffled(" + std::to_string(order_seed) + ")"
              : "shard_shuffle(" + std::to_string(order_seed) + ", " + std::to_string(shard_sizes.size()) +
                    " shards, buffer " + std::to_string(shuffle_buffer) + ")");
  if (world_size > 1 || sharded_sampler_for_one_rank) {
    out << ", rank " << rank << "/" << world_size << (drop_remainder ? " drop" : " pad");
  }
  out << "; on_error "
      << (mode() == SkipMode::kFail     ? "fail"
          : mode() == SkipMode::kRefill ? "skip (refill)"
                                        : "skip (replace)");
  out << ", " << data.failing_reads.size() << " failing reads, " << data.corrupted.size() << " corrupt samples";
  if (options.cache.enabled()) out << "; cache " << cache_memory_name(options.cache.memory);
  if (cache_move_after != 0) out << " (to the host and back every " << cache_move_after << " batches)";
  if (data.pinned) out << "; pinned reads, direct copies from " << options.transfer.direct_copy_bytes << " bytes";
  out << "; pad " << options.collate.pad_value << " suffix '" << options.collate.lengths_suffix << "'";
  for (const auto& [name, value] : options.collate.pad_values) out << " " << name << "=" << value;
  out << "; alignment " << options.transfer.min_alignment << ", chunk " << options.transfer.max_chunk_bytes
      << ", parallel pack from " << options.transfer.parallel_pack_bytes
      << (options.transfer.wait == WaitMode::kSpin ? ", spin" : "");
  if (options.pool.slab_bytes != 0) out << ", slab " << options.pool.slab_bytes;
  out << "; " << (via_config ? "via Config" : "via PipelineOptions") << ", device " << options.device;
  out << "; segments";
  for (size_t s = 0; s < segments.size(); ++s) {
    const Segment& segment = segments[s];
    out << " [" << segment.decode_threads << " threads, prefetch " << segment.prefetch;
    if (segment.slab_count != 0) out << ", " << segment.slab_count << " slabs";
    if (segment.max_delay.count() != 0) out << ", delay<" << segment.max_delay.count() << "us";
    if (segment.hold != 0) out << ", holding " << segment.hold;
    if (segment.watch_stats) out << ", stats watched";
    switch (segment.consumer) {
      case Consumer::kNext: out << ", next()"; break;
      case Consumer::kNextFor: out << ", next_for(" << segment.next_timeout.count() << "us)"; break;
      case Consumer::kIterator: out << ", iterator"; break;
      case Consumer::kAnyThread: out << ", next() from new threads"; break;
    }
    if (s < stops.size()) {
      switch (segment.stop) {
        case StopStyle::kClose: out << ", stop: close()"; break;
        case StopStyle::kDestroy: out << ", stop: destroy"; break;
        case StopStyle::kLetItFill: out << ", stop: let it fill, destroy"; break;
        case StopStyle::kCloseFromThread: out << ", stop: close() from another thread"; break;
        case StopStyle::kOverlap: out << ", stop: keep it beside the next"; break;
      }
      if (segment.state_through_json) out << " (state through JSON)";
    }
    out << "]";
  }
  return out.str();
}

Round draw_round(uint64_t seed, uint64_t number, const std::string& device) {
  std::mt19937_64 rng(mix_seed(seed, number));
  const auto uniform = [&rng](int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
  };
  const auto chance = [&rng](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  Round round;
  round.number = number;
  round.seed = seed;
  SoakData& data = round.data;
  data.seed = rng();
  const int64_t size_class = uniform(0, 99);
  data.samples = size_class < 1    ? 0
                 : size_class < 60 ? uniform(1, 200)
                 : size_class < 90 ? uniform(200, 1000)
                                   : uniform(1000, 3000);
  const at::ScalarType dtypes[] = {at::kByte, at::kChar,     at::kShort, at::kInt,   at::kLong,
                                   at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};
  const int64_t fields = uniform(1, 5);
  for (int64_t f = 0; f < fields; ++f) {
    SoakField field;
    field.name = std::string("f").append(std::to_string(f));
    field.dtype = dtypes[uniform(0, 8)];
    field.variable = chance(0.35);
    const int64_t dims = field.variable ? uniform(0, 2) : uniform(0, 3);
    for (int64_t d = 0; d < dims; ++d) {
      field.shape.push_back(!field.variable && chance(0.05) ? 0 : uniform(1, field.variable ? 4 : 5));
    }
    if (field.variable) {
      field.min_length = uniform(0, 3);
      field.max_length = field.min_length + uniform(0, 24);
      field.max_length_known = chance(0.85);
    }
    data.fields.push_back(std::move(field));
  }
  data.typed_fixed = chance(0.3);

  // Order and ranks.
  const int64_t order_kind = uniform(0, 99);
  round.order = order_kind < 45                        ? OrderKind::kSequential
                : order_kind < 85 || data.samples == 0 ? OrderKind::kShuffled
                                                       : OrderKind::kShardShuffle;
  round.order_seed = static_cast<uint64_t>(uniform(0, 1000000));
  if (round.order == OrderKind::kShardShuffle) {
    const int64_t shards = uniform(1, 8);
    std::vector<uint64_t> cuts;
    for (int64_t s = 1; s < shards; ++s)
      cuts.push_back(static_cast<uint64_t>(uniform(0, static_cast<int64_t>(data.samples))));
    std::sort(cuts.begin(), cuts.end());
    uint64_t previous = 0;
    for (const uint64_t cut : cuts) {
      round.shard_sizes.push_back(cut - previous);
      previous = cut;
    }
    round.shard_sizes.push_back(data.samples - previous);
    round.shuffle_buffer = static_cast<size_t>(uniform(1, static_cast<int64_t>(data.samples) + 5));
  }
  if (chance(0.4)) {
    round.world_size = static_cast<uint64_t>(uniform(2, 5));
    round.rank = static_cast<uint64_t>(uniform(0, static_cast<int64_t>(round.world_size) - 1));
    round.drop_remainder = chance(0.4);
  }
  round.via_config = round.order != OrderKind::kShardShuffle && chance(0.6);
  round.sharded_sampler_for_one_rank = !round.via_config && round.world_size == 1 && chance(0.2);

  // Batches.
  PipelineOptions& options = round.options;
  const int64_t batch_class = uniform(0, 99);
  options.batch_size = static_cast<size_t>(batch_class < 50   ? uniform(1, 8)
                                           : batch_class < 85 ? uniform(9, 32)
                                                              : uniform(33, 128));
  options.epochs = static_cast<uint64_t>(uniform(1, 3));
  options.drop_last = chance(0.3);
  if (chance(0.25)) {
    const uint64_t rough = data.samples / round.world_size * options.epochs / options.batch_size;
    options.max_batches = static_cast<uint64_t>(uniform(1, static_cast<int64_t>(rough) + 2));
  }
  // "Run until max_batches": epochs without end, for one rank (whose epochs visit the same samples,
  // so an epoch that makes no batch ends the run with an error rather than skipping forever).
  if (round.world_size == 1 && chance(0.1)) {
    options.epochs = uint64_t{1} << uniform(20, 40);
    const uint64_t per_epoch = std::max<uint64_t>(1, data.samples / options.batch_size);
    options.max_batches =
        static_cast<uint64_t>(uniform(1, static_cast<int64_t>(std::min<uint64_t>(per_epoch * 4 + 2, 4000))));
  }
  options.on_error = chance(0.5) ? OnError::kSkip : OnError::kFail;
  // Through PipelineOptions, skip_replaces is the caller's: mostly set for several ranks (as the
  // Config path does, so that ranks keep the same number of batches), now and then for one or not.
  options.skip_replaces =
      options.on_error == OnError::kSkip && !round.via_config && chance(round.world_size > 1 ? 0.8 : 0.25);

  // Faults: under fail few (a run ends at its first), under skip up to 30%, and now and then a run
  // of 90 to 130 failing samples, around the replacement search's limit of 100.
  if (data.samples > 0 && chance(0.55)) {
    const double densities_fail[] = {0.001, 0.005, 0.02};
    const double densities_skip[] = {0.005, 0.02, 0.1, 0.3};
    const double density =
        options.on_error == OnError::kFail ? densities_fail[uniform(0, 2)] : densities_skip[uniform(0, 3)];
    for (uint64_t index = 0; index < data.samples; ++index) {
      if (!chance(density)) continue;
      (chance(0.5) ? data.failing_reads : data.corrupted).insert(index);
    }
    if (chance(0.05) && data.samples > 150) {
      const uint64_t length = static_cast<uint64_t>(uniform(90, 130));
      const uint64_t first = static_cast<uint64_t>(uniform(0, static_cast<int64_t>(data.samples - length)));
      for (uint64_t index = first; index < first + length; ++index) {
        if (data.corrupted.count(index) == 0) data.failing_reads.insert(index);
      }
    }
  }

  // Now and then an endless run whose epochs cannot make a batch: every sample fails, or under
  // drop_last fewer than batch_size read. It must end with an error, not skip forever.
  if (options.epochs > 3 && options.on_error == OnError::kSkip && data.samples > 0 && chance(0.3)) {
    const int64_t most = static_cast<int64_t>(std::min<uint64_t>(options.batch_size - 1, data.samples));
    const uint64_t keep = options.drop_last ? static_cast<uint64_t>(uniform(0, most)) : 0;
    for (uint64_t index = keep; index < data.samples; ++index) {
      if (data.corrupted.count(index) == 0) data.failing_reads.insert(index);
    }
  }

  // Collate, transfer, pool, cache.
  const double pads[] = {0, 1, 7, 100};
  options.collate.pad_value = pads[uniform(0, 3)];
  for (const SoakField& field : data.fields) {
    if (!field.variable || !chance(0.3)) continue;
    double value = 0;
    switch (field.dtype) {
      case at::kByte: value = static_cast<double>(uniform(0, 255)); break;
      case at::kChar: value = static_cast<double>(uniform(-128, 127)); break;
      case at::kHalf:
      case at::kBFloat16:
      case at::kFloat:
      case at::kDouble: value = std::vector<double>{-1.5, 0.25, 1000, -0.0}[static_cast<size_t>(uniform(0, 3))]; break;
      default: value = static_cast<double>(uniform(-1000, 1000)); break;
    }
    options.collate.pad_values[field.name] = value;
  }
  options.collate.lengths_suffix = std::vector<std::string>{"_lengths", "_lengths", "_len", ".n"}[uniform(0, 3)];
  options.transfer.min_alignment = size_t{1} << uniform(0, 6);
  if (chance(0.5)) options.transfer.max_chunk_bytes = size_t{4096} << uniform(0, 3);
  if (chance(0.3)) options.transfer.parallel_pack_bytes = 1;
  if (chance(0.2)) options.transfer.wait = WaitMode::kSpin;
  options.transfer.high_priority_stream = chance(0.2);
  options.device = device;
  bool unbounded = false;
  size_t largest = 4096;
  for (size_t f = 0; f < data.fields.size(); ++f) {
    const SoakField& field = data.fields[f];
    int64_t row = static_cast<int64_t>(element_size(field.dtype));
    for (const int64_t size : field.shape) row *= size;
    const int64_t rows = field.variable ? field.max_length : 1;
    largest += options.batch_size * static_cast<size_t>(row * rows) + options.transfer.min_alignment + 64;
    if (field.variable) largest += options.batch_size * 8 + options.transfer.min_alignment + 64;
    unbounded = unbounded || (field.variable && !field.max_length_known);
  }
  if (unbounded) options.pool.slab_bytes = largest;  // the largest batch is unknown to ferry
  if (!unbounded && chance(0.15)) {
    options.cache.memory = device == "cpu" ? CacheMemory::kHost
                           : chance(0.5)   ? CacheMemory::kDevice
                                           : CacheMemory::kManaged;
    if (options.cache.memory == CacheMemory::kManaged && chance(0.5)) {
      round.cache_move_after = static_cast<uint64_t>(uniform(1, 20));
    }
  }
  // Pinned reads need CUDA; with a small direct_copy_bytes, H2D copies from them in place.
  if (device != "cpu" && chance(0.2)) {
    data.pinned = true;
    options.transfer.direct_copy_bytes = size_t{64} << uniform(0, 6);
  }

  // Stops (drawn against the expected run later: here only how many) and segments.
  const int64_t stop_class = uniform(0, 99);
  const size_t stops = stop_class < 40 ? 0 : stop_class < 70 ? 1 : stop_class < 90 ? 2 : 3;
  round.stops.resize(stops);
  for (size_t s = 0; s <= stops; ++s) {
    Segment segment;
    segment.decode_threads = static_cast<size_t>(uniform(1, 8));
    segment.prefetch = static_cast<size_t>(uniform(1, 6));
    if (chance(0.3)) segment.slab_count = segment.prefetch + static_cast<size_t>(uniform(0, 2));
    if (chance(0.1)) segment.max_delay = std::chrono::microseconds(uniform(20, 300));
    const int64_t consumer = uniform(0, 9);
    segment.consumer = consumer < 5   ? Consumer::kNext
                       : consumer < 7 ? Consumer::kNextFor
                       : consumer < 9 ? Consumer::kIterator
                                      : Consumer::kAnyThread;
    segment.next_timeout = std::chrono::microseconds(uniform(0, 3000));
    const int64_t stop = uniform(0, 9);
    const StopStyle styles[] = {StopStyle::kClose,   StopStyle::kClose,           StopStyle::kClose,
                                StopStyle::kDestroy, StopStyle::kDestroy,         StopStyle::kLetItFill,
                                StopStyle::kOverlap, StopStyle::kCloseFromThread, StopStyle::kCloseFromThread,
                                StopStyle::kOverlap};
    segment.stop = styles[stop];
    segment.watch_stats = chance(0.2);
    segment.state_through_json = chance(0.5);
    if (chance(0.2)) segment.hold = static_cast<size_t>(uniform(1, 8));
    round.segments.push_back(segment);
  }
  return round;
}

// ---------------------------------------------------------------------------------------------
// Running a round.

/// A failed check: what and where; the round is abandoned and reported.
class Mismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

#define SOAK_CHECK(condition, message)                       \
  do {                                                       \
    if (!(condition)) {                                      \
      std::ostringstream soak_out_;                          \
      soak_out_ << message;                                  \
      throw Mismatch(soak_out_.str() + " [" #condition "]"); \
    }                                                        \
  } while (0)

std::string list_text(const std::vector<uint64_t>& values, size_t most = 24) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < values.size() && i < most; ++i) out << (i ? ", " : "") << values[i];
  if (values.size() > most) out << ", ... (" << values.size() << ")";
  out << "]";
  return out.str();
}

/// The pad element of each field, as torch::full converts the value.
std::vector<std::string> pad_bytes(const SoakSource& source, const CollateOptions& collate) {
  std::vector<std::string> pads;
  for (const SoakField& field : source.data().fields) {
    const auto custom = collate.pad_values.find(field.name);
    const double value = custom != collate.pad_values.end() ? custom->second : collate.pad_value;
    const at::Tensor element = at::full({1}, value, at::TensorOptions().dtype(field.dtype));
    pads.emplace_back(static_cast<const char*>(element.data_ptr()), element.nbytes());
  }
  return pads;
}

class RoundRunner {
 public:
  RoundRunner(const Round& round) : round_(round), source_(std::make_shared<SoakSource>(round.data)) {}

  void run();

 private:
  struct Built {
    std::unique_ptr<Pipeline> pipeline;
    std::shared_ptr<PinnedPool> pool;  // the options path keeps a handle to check it after the pipeline is gone
  };

  const std::vector<uint64_t>& epoch_order(uint64_t epoch);
  std::shared_ptr<const Sampler> make_sampler_for_options() const;
  Built build(size_t segment, const std::optional<PipelineState>& resume);
  void check_batch(const Batch& batch, uint64_t sequence, uint64_t global);
  void check_skips(const PipelineStats& stats, const BatchCursor& start, uint64_t first_batch, uint64_t delivered,
                   bool ended);
  /// Destroys a pipeline and checks that every slab came back; the pool outlives it only in the
  /// handle the PipelineOptions path keeps.
  void retire(Built& built);
  void run_checked();

  const Round& round_;
  std::shared_ptr<SoakSource> source_;
  std::vector<std::string> pads_;
  RunShape shape_;
  ExpectedRun expected_;
  at::Device device_{at::kCPU};
  Config config_;                // the Config path's (pipeline options set per segment)
  std::vector<uint64_t> stops_;  // after which batches of the run it stops (drawn against expected_)
  std::map<uint64_t, std::vector<uint64_t>> orders_;  // epoch_order()'s
  std::shared_ptr<const Sampler> inner_order_;
};

std::shared_ptr<const Sampler> RoundRunner::make_sampler_for_options() const {
  const uint64_t n = round_.data.samples;
  std::shared_ptr<const Sampler> inner;
  switch (round_.order) {
    case OrderKind::kSequential: inner = std::make_shared<SequentialSampler>(n); break;
    case OrderKind::kShuffled: inner = std::make_shared<ShuffledSampler>(n, round_.order_seed); break;
    case OrderKind::kShardShuffle:
      inner = std::make_shared<ShardShuffleSampler>(
          round_.shard_sizes, ShardShuffleSampler::Options{round_.order_seed, round_.shuffle_buffer, true});
      break;
  }
  if (round_.world_size == 1 && !round_.sharded_sampler_for_one_rank) return inner;
  return std::make_shared<ShardedSampler>(
      inner, round_.rank, round_.world_size,
      round_.drop_remainder ? ShardedSampler::Remainder::kDrop : ShardedSampler::Remainder::kPad);
}

// This rank's order of an epoch: the inner order (identity, or ferry's shuffles, each epoch checked
// to be a permutation), dealt to ranks here as ShardedSampler documents it (global position q * W + r,
// wrapped past the end for pad). Computed when first asked for, and kept.
const std::vector<uint64_t>& RoundRunner::epoch_order(uint64_t epoch) {
  if (const auto known = orders_.find(epoch); known != orders_.end()) return known->second;
  const uint64_t n = round_.data.samples;
  if (!inner_order_ && round_.order == OrderKind::kShuffled) {
    inner_order_ = std::make_shared<ShuffledSampler>(n, round_.order_seed);
  }
  if (!inner_order_ && round_.order == OrderKind::kShardShuffle) {
    inner_order_ = std::make_shared<ShardShuffleSampler>(
        round_.shard_sizes, ShardShuffleSampler::Options{round_.order_seed, round_.shuffle_buffer, true});
  }
  const uint64_t w = round_.world_size;
  const uint64_t m = round_.drop_remainder ? n / w : (n + w - 1) / w;
  std::vector<uint64_t> order(n);
  std::vector<char> seen(n, 0);
  for (uint64_t p = 0; p < n; ++p) {
    order[p] = inner_order_ ? inner_order_->index(epoch, p) : p;
    SOAK_CHECK(order[p] < n && !seen[order[p]], "the sampler's epoch " << epoch << " is not a permutation of 0.."
                                                                       << n - 1 << " (position " << p << ": "
                                                                       << order[p] << ")");
    seen[order[p]] = 1;
  }
  std::vector<uint64_t> share(m);
  for (uint64_t q = 0; q < m; ++q) share[q] = order[(q * w + round_.rank) % n];
  if (orders_.size() > 64) orders_.erase(orders_.begin());  // a long run keeps only recent epochs
  return orders_.emplace(epoch, std::move(share)).first->second;
}

RoundRunner::Built RoundRunner::build(size_t index, const std::optional<PipelineState>& resume) {
  const Segment& segment = round_.segments[index];
  PipelineOptions options = round_.options;
  options.decode_threads = segment.decode_threads;
  options.prefetch = segment.prefetch;
  options.pool.slab_count = segment.slab_count;
  SoakData data = round_.data;
  data.max_delay = segment.max_delay;
  // A source per segment: the same samples, this segment's read delays.
  auto source = std::make_shared<const SoakSource>(std::move(data), /*keep_truth=*/false);
  std::optional<PipelineState> state = resume;
  if (resume && segment.state_through_json) state = parse_pipeline_state(resume->to_json(), "soak-state.json");
  counters.pipelines.fetch_add(1);
  if (round_.via_config) {
    Config config = config_;
    config.pipeline = options;
    return {std::make_unique<Pipeline>(make_pipeline(config, source, state)), nullptr};
  }
  if (state) {
    options.first_batch = state->next_batch;
    options.start = state->next;
  }
  StageSet stages = make_standard_stages(source, options, make_sampler_for_options());
  std::shared_ptr<PinnedPool> pool = stages.pool;
  return {std::make_unique<Pipeline>(pipeline_from_stages(std::move(stages), options)), pool};
}

void RoundRunner::check_batch(const Batch& batch, uint64_t sequence, uint64_t global) {
  SOAK_CHECK(global < expected_.batches.size(),
             "an extra batch: " << global << " (epoch " << batch.epoch() << ", index " << batch.index()
                                << ") after the expected " << expected_.batches.size());
  const ExpectedBatch& want = expected_.batches[global];
  SOAK_CHECK(batch.sequence() == sequence,
             "batch " << global << ": sequence " << batch.sequence() << ", expected " << sequence);
  SOAK_CHECK(batch.epoch() == want.epoch && batch.index() == want.index,
             "batch " << global << ": epoch/index " << batch.epoch() << "/" << batch.index() << ", expected "
                      << want.epoch << "/" << want.index);
  SOAK_CHECK(batch.sample_indices() == want.samples,
             "batch " << global << " (epoch " << want.epoch << ", index " << want.index << "): samples "
                      << list_text(batch.sample_indices()) << ", expected " << list_text(want.samples));
  const auto& fields = source_->data().fields;
  std::vector<std::string> names;
  for (const SoakField& field : fields) {
    names.push_back(field.name);
    if (field.variable) names.push_back(field.name + round_.options.collate.lengths_suffix);
  }
  SOAK_CHECK(batch.names() == names, "batch " << global << ": fields differ from the expected " << names.size());
  SOAK_CHECK(batch.device() == device_, "batch " << global << " is on " << batch.device() << ", expected " << device_);

  // The bytes: every field is a view into the batch's one allocation (buffer()), read here through
  // one host copy of it (the allocation itself on the CPU), at each field's offset.
  const at::Tensor& buffer = batch.buffer();
  const bool any_bytes =
      std::any_of(batch.tensors().begin(), batch.tensors().end(), [](const at::Tensor& t) { return t.nbytes() != 0; });
  at::Tensor host;
  if (any_bytes) {
    SOAK_CHECK(buffer.defined() && buffer.device() == device_, "batch " << global << " has no buffer() on " << device_);
    host = device_.is_cuda() ? buffer.to(at::kCPU) : buffer;
  }
  const size_t b = want.samples.size();
  size_t column = 0;
  for (size_t f = 0; f < fields.size(); ++f) {
    const SoakField& field = fields[f];
    const at::Tensor& tensor = batch.tensors()[column];
    std::vector<int64_t> sizes{static_cast<int64_t>(b)};
    int64_t longest = 0;
    if (field.variable) {
      for (const uint64_t index : want.samples) longest = std::max(longest, source_->length(index, f));
      sizes.push_back(longest);
    }
    sizes.insert(sizes.end(), field.shape.begin(), field.shape.end());
    SOAK_CHECK(tensor.scalar_type() == field.dtype && tensor.sizes().vec() == sizes,
               "batch " << global << " field '" << field.name << "': " << tensor.scalar_type() << tensor.sizes()
                        << ", expected " << field.dtype << at::IntArrayRef(sizes));
    SOAK_CHECK(tensor.is_contiguous(), "batch " << global << " field '" << field.name << "' is not contiguous");
    const auto bytes_of = [&](const at::Tensor& t) -> const unsigned char* {
      if (t.numel() == 0) return nullptr;
      const auto offset = static_cast<const char*>(t.data_ptr()) - static_cast<const char*>(buffer.data_ptr());
      SOAK_CHECK(offset >= 0 && static_cast<size_t>(offset) + t.nbytes() <= buffer.nbytes(),
                 "batch " << global << ": a field lies outside buffer()");
      return static_cast<const unsigned char*>(host.data_ptr()) + offset;
    };
    const unsigned char* got = bytes_of(tensor);
    const size_t row = source_->row_bytes(f);
    const size_t stride = field.variable ? row * static_cast<size_t>(longest) : row;
    const std::string& pad = pads_[f];
    for (size_t s = 0; s < b && stride != 0; ++s) {
      const std::string& truth = source_->truth(want.samples[s], f);
      const unsigned char* cell = got + s * stride;
      if (std::memcmp(cell, truth.data(), truth.size()) != 0) {
        size_t byte = 0;
        while (cell[byte] == static_cast<unsigned char>(truth[byte])) ++byte;
        SOAK_CHECK(false, "batch " << global << " field '" << field.name << "' sample " << want.samples[s] << " (row "
                                   << s << "): byte " << byte << " of " << truth.size() << " is " << int{cell[byte]}
                                   << ", expected " << int{static_cast<unsigned char>(truth[byte])});
      }
      for (size_t p = truth.size(); p < stride; p += pad.size()) {
        SOAK_CHECK(std::memcmp(cell + p, pad.data(), pad.size()) == 0,
                   "batch " << global << " field '" << field.name << "' sample " << want.samples[s] << " (row " << s
                            << "): padding at byte " << p << " is not the pad value");
      }
    }
    counters.bytes.fetch_add(tensor.nbytes(), std::memory_order_relaxed);
    ++column;
    if (!field.variable) continue;
    const at::Tensor& lengths = batch.tensors()[column++];
    SOAK_CHECK(
        lengths.scalar_type() == at::kLong && lengths.sizes().vec() == std::vector<int64_t>{static_cast<int64_t>(b)},
        "batch " << global << " field '" << field.name << "' lengths: " << lengths.scalar_type() << lengths.sizes());
    const unsigned char* length_bytes = bytes_of(lengths);
    for (size_t s = 0; s < b; ++s) {
      int64_t length = 0;
      std::memcpy(&length, length_bytes + s * 8, 8);
      SOAK_CHECK(length == source_->length(want.samples[s], f),
                 "batch " << global << " field '" << field.name << "' sample " << want.samples[s] << ": length "
                          << length << ", expected " << source_->length(want.samples[s], f));
    }
    counters.bytes.fetch_add(lengths.nbytes(), std::memory_order_relaxed);
  }
}

void RoundRunner::check_skips(const PipelineStats& stats, const BatchCursor& start, uint64_t first_batch,
                              uint64_t delivered, bool ended) {
  const bool checkable = !(shape_.mode == SkipMode::kReplace && expected_.error);
  if (!checkable) return;
  const uint64_t want = expected_skip_count(shape_, expected_, start, first_batch, delivered, ended);
  if (ended) {
    SOAK_CHECK(stats.skipped_samples == want,
               "the pipeline counted " << stats.skipped_samples << " skipped samples, expected " << want);
  } else {
    SOAK_CHECK(stats.skipped_samples >= want, "the pipeline counted " << stats.skipped_samples
                                                                      << " skipped samples, at least " << want
                                                                      << " expected by now");
  }
  SOAK_CHECK(stats.skipped.size() == std::min<uint64_t>(stats.skipped_samples, PipelineStats::kMaxListedSkips),
             "the pipeline lists " << stats.skipped.size() << " skipped samples of " << stats.skipped_samples);
  // In order, the samples the expectation names. Of a pipeline stopped early only those up to its
  // last delivered batch: after close() decode leaves samples undecoded, so the skips recorded past
  // that point (from batches in flight) may leave out a failing sample and name a later one.
  const size_t ordered = ended ? stats.skipped.size() : std::min<size_t>(stats.skipped.size(), want);
  const std::vector<uint64_t> order = expected_skips(shape_, expected_, start, first_batch, ordered);
  std::vector<uint64_t> listed;
  for (const SkippedSample& skipped : stats.skipped) {
    SOAK_CHECK(source_->fails(skipped.index), "sample " << skipped.index << " was skipped, but it reads and decodes");
    SOAK_CHECK(skipped.stage == "decode", "skipped sample " << skipped.index << " failed in '" << skipped.stage << "'");
    SOAK_CHECK(skipped.reason.find("sample-" + std::to_string(skipped.index) + ":") != std::string::npos,
               "skipped sample " << skipped.index << ": the reason does not name it: " << skipped.reason);
    if (listed.size() < ordered) listed.push_back(skipped.index);
  }
  SOAK_CHECK(listed == order, "the pipeline skipped " << list_text(listed) << ", expected " << list_text(order));
  counters.skipped_counted.fetch_add(ended ? stats.skipped_samples : want, std::memory_order_relaxed);
}

void RoundRunner::retire(Built& built) {
  built.pipeline.reset();
  SOAK_CHECK(!built.pool || (built.pool.use_count() == 1 && built.pool->stats().leased_bytes == 0),
             "a slab outlived its pipeline");
  moved();
}

/// A helper thread of a segment (closing the pipeline, watching its stats), told to stop and joined
/// by finish() or, when a check fails first, by the destructor: before the pipeline it uses goes.
struct Helper {
  std::atomic<bool> stop{false};
  std::thread thread;
  void finish() {
    stop.store(true);
    if (thread.joinable()) thread.join();
  }
  ~Helper() { finish(); }
};

void RoundRunner::run() {
  try {
    run_checked();
  } catch (const Mismatch& mismatch) {
    throw Mismatch(std::string(mismatch.what()) + "; stops after batches " + list_text(stops_) + " of " +
                   std::to_string(expected_.batches.size()) + (expected_.error ? " and the error" : ""));
  }
}

void RoundRunner::run_checked() {
  pads_ = pad_bytes(*source_, round_.options.collate);
  device_ = resolve_device(round_.options.device);
  config_.origin = "soak round " + std::to_string(round_.number);
  config_.source.kind = "synthetic";  // (for the order keys a saved state carries; the source is the soak's)
  config_.source.keys = KeyValue::mapping({{"samples", KeyValue::scalar(std::to_string(round_.data.samples))},
                                           {"seed", KeyValue::scalar(std::to_string(round_.data.seed))},
                                           {"fields", KeyValue::list({})}});
  config_.sampler.shuffle = round_.order == OrderKind::kShuffled;
  config_.sampler.seed = round_.order_seed;
  config_.sampler.rank = round_.rank;
  config_.sampler.world_size = round_.world_size;
  config_.sampler.drop_remainder = round_.drop_remainder;

  shape_.order = [this](uint64_t epoch) -> const std::vector<uint64_t>& { return epoch_order(epoch); };
  shape_.epochs = round_.options.epochs;
  shape_.epoch_size = round_.drop_remainder ? round_.data.samples / round_.world_size
                                            : (round_.data.samples + round_.world_size - 1) / round_.world_size;
  // What the pipeline's sampler (or the Config path's, the same kinds) says of itself.
  shape_.same_samples_every_epoch = make_sampler_for_options()->same_samples_every_epoch();
  shape_.batch_size = round_.options.batch_size;
  shape_.drop_last = round_.options.drop_last;
  shape_.max_batches = round_.options.max_batches;
  shape_.mode = round_.mode();
  shape_.fails = [source = source_](uint64_t index) { return source->fails(index); };
  expected_ = expected_run(shape_);
  if (expected_.error && !expected_.error->batch_index) counters.epoch_without_batch.fetch_add(1);

  // Stops anywhere from before the first batch to after the last (where the resumed run must deliver
  // nothing, or the error).
  std::vector<uint64_t>& stops = stops_;
  stops = round_.stops;
  std::mt19937_64 rng(mix_seed(round_.seed ^ 0x5709, round_.number));
  for (uint64_t& stop : stops) stop = std::uniform_int_distribution<uint64_t>(0, expected_.batches.size())(rng);
  std::sort(stops.begin(), stops.end());

  uint64_t global = 0;  // batches of the run delivered so far
  std::optional<PipelineState> state;
  std::optional<Built> lingering;  // the stopped pipeline, alive beside the next one (StopStyle::kOverlap)
  const auto retire_lingering = [&] {
    if (!lingering) return;
    retire(*lingering);
    lingering.reset();
  };
  for (size_t s = 0; s < round_.segments.size(); ++s) {
    const Segment& segment = round_.segments[s];
    const bool last_segment = s == stops.size();
    // Closed from another thread: the stop comes when it comes, not at a drawn batch.
    const bool closed_by_thread = !last_segment && segment.stop == StopStyle::kCloseFromThread;
    const uint64_t stop_at = last_segment || closed_by_thread ? UINT64_MAX : stops[s];
    const uint64_t first_batch = global;
    const BatchCursor start = state && state->next ? *state->next : BatchCursor{};
    if (s > 0) counters.resumes.fetch_add(1, std::memory_order_relaxed);
    Built built = build(s, state);
    moved();
    Pipeline& pipeline = *built.pipeline;
    if (s > 0 || state) {
      SOAK_CHECK(pipeline.state().next_batch == global, "a resumed pipeline's state().next_batch is "
                                                            << pipeline.state().next_batch << ", expected " << global);
    }

    Helper closer;
    if (closed_by_thread) {
      const auto delay = std::chrono::microseconds(rng() % 4000);
      closer.thread = std::thread([&pipeline, delay] {
        std::this_thread::sleep_for(delay);
        pipeline.close();
      });
    }
    // stats() and state() from another thread all along: what a monitor does. Each snapshot keeps the
    // invariants PipelineStats documents.
    Helper watcher;
    std::mutex watch_mutex;
    std::string watch_problem;
    if (segment.watch_stats) {
      watcher.thread = std::thread([&] {
        uint64_t batches = 0;
        uint64_t next_batch = first_batch;
        const auto problem = [&](const std::string& text) {
          std::lock_guard lock(watch_mutex);
          if (watch_problem.empty()) watch_problem = text;
        };
        while (!watcher.stop.load()) {
          const PipelineStats stats = pipeline.stats();
          if (stats.batches < batches) problem("stats().batches went back from " + std::to_string(batches));
          batches = stats.batches;
          if (stats.planner.items_out > stats.planner.items_in)
            problem("the planner planned more batches than samples");
          for (const StageStats& stage : stats.stages) {
            if (stage.items_out > stage.items_in) problem("stage " + stage.name + " has more items out than in");
          }
          if (stats.in_flight.peak > stats.in_flight.capacity || stats.ready_queue.peak > stats.ready_queue.capacity) {
            problem("an occupancy peak passed its capacity (prefetch " + std::to_string(stats.prefetch) + ")");
          }
          const uint64_t now_next = pipeline.state().next_batch;
          if (now_next < next_batch) problem("state().next_batch went back from " + std::to_string(next_batch));
          next_batch = now_next;
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      });
    }

    uint64_t sequence = 0;
    std::optional<Error> error;
    bool ended = false;
    const auto take = [&]() -> std::optional<Batch> {
      switch (segment.consumer) {
        case Consumer::kNextFor:
          while (true) {  // a timed-out wait is not progress: the watchdog sees nothing move
            Pipeline::Next next = pipeline.next_for(segment.next_timeout);
            if (!next.timed_out) return std::move(next.batch);
          }
        case Consumer::kAnyThread:  // one thread at a time, any thread: each call from a new one
          return std::async(std::launch::async, [&pipeline] { return pipeline.next(); }).get();
        default: return pipeline.next();
      }
    };
    // Batches the consumer still holds, each checked again when it lets go of it: a batch's memory
    // must stay its own however many batches come after it.
    std::deque<std::pair<Batch, std::pair<uint64_t, uint64_t>>> held;
    const auto let_go = [&](size_t keep) {
      while (held.size() > keep) {
        check_batch(held.front().first, held.front().second.first, held.front().second.second);
        held.pop_front();
      }
    };
    const auto accept = [&](const Batch& batch) {
      check_batch(batch, sequence, global);
      if (segment.hold != 0) {
        held.emplace_back(batch, std::pair{sequence, global});
        let_go(segment.hold);
      }
      ++sequence;
      ++global;
      counters.batches.fetch_add(1, std::memory_order_relaxed);
      counters.samples.fetch_add(batch.batch_size(), std::memory_order_relaxed);
      moved();
      retire_lingering();  // the one before has stayed alive until this one delivered
      if (round_.cache_move_after != 0 && sequence % round_.cache_move_after == 0) {
        // To the host, then back after as many batches; batches keep coming meanwhile.
        pipeline.cache_to(sequence / round_.cache_move_after % 2 == 1 ? -1 : device_.index());
        moved();
      }
    };
    try {
      if (segment.consumer == Consumer::kIterator) {
        if (global < stop_at) {
          Pipeline::Iterator it = pipeline.begin();
          for (; it != pipeline.end(); ++it) {
            accept(*it);
            if (global >= stop_at) break;
          }
          ended = it == pipeline.end();
        }
      } else {
        while (global < stop_at) {
          std::optional<Batch> batch = take();
          if (!batch) {
            ended = true;
            break;
          }
          accept(*batch);
        }
      }
    } catch (const Error& e) {
      error = e;
    }
    closer.finish();
    watcher.finish();
    SOAK_CHECK(watch_problem.empty(), "seen from another thread: " << watch_problem);
    retire_lingering();

    const PipelineState now = pipeline.state();
    SOAK_CHECK(now.next_batch == global,
               "state().next_batch is " << now.next_batch << " after " << global << " batches");
    if (global > first_batch) {
      const ExpectedBatch& last = expected_.batches[global - 1];
      SOAK_CHECK(now.last_epoch == std::optional<uint64_t>(last.epoch) &&
                     now.last_index == std::optional<uint64_t>(last.index),
                 "state() names another last batch than " << last.epoch << "/" << last.index);
      SOAK_CHECK(now.next.has_value(), "state() has no cursor after batch " << global - 1);
      const std::string cursor = check_cursor(shape_, expected_, global - 1, *now.next);
      SOAK_CHECK(cursor.empty(), cursor);
    }

    if (error) {
      // Only the expected error, after exactly the batches before it, naming its sample.
      SOAK_CHECK(expected_.error.has_value(), "an unexpected error after " << global << " batches: " << error->what());
      const ExpectedError& want = *expected_.error;
      SOAK_CHECK(global == expected_.batches.size(), "the error came after " << global << " batches, expected after "
                                                                             << expected_.batches.size() << ": "
                                                                             << error->what());
      SOAK_CHECK(error->stage() == "decode" && error->sample_index() == want.sample && error->epoch() == want.epoch &&
                     error->batch_index() == want.batch_index,
                 "the error names stage '"
                     << error->stage() << "', sample " << error->sample_index().value_or(UINT64_MAX) << ", epoch "
                     << error->epoch().value_or(UINT64_MAX) << ", batch " << error->batch_index().value_or(UINT64_MAX)
                     << "; expected decode, sample " << want.sample << ", epoch " << want.epoch << ", batch "
                     << (want.batch_index ? std::to_string(*want.batch_index) : "none") << ": " << error->what());
      const std::string text = error->what();
      SOAK_CHECK(text.find("sample-" + std::to_string(want.sample)) != std::string::npos &&
                     text.find("sample " + std::to_string(want.sample)) != std::string::npos,
                 "the error's message does not name sample " << want.sample << ": " << text);
      // The error stays: the next call throws it again.
      std::string again;
      try {
        (void)pipeline.next();
      } catch (const Error& e) {
        again = e.what();
      }
      SOAK_CHECK(again == text, "after the error, next() gave '" << again << "' instead of the error again");
      const PipelineStats stats = pipeline.stats();
      SOAK_CHECK(stats.batches == sequence, "stats().batches is " << stats.batches << ", " << sequence << " delivered");
      check_skips(stats, start, first_batch, global, false);
      counters.errors_expected.fetch_add(1, std::memory_order_relaxed);
      retire(built);
      let_go(0);  // (after the pipeline is gone: its batches stay valid)
      break;
    }
    if (ended && !closed_by_thread) {
      SOAK_CHECK(global == expected_.batches.size(),
                 "the run ended after " << global << " batches, expected " << expected_.batches.size());
      SOAK_CHECK(!expected_.error,
                 "the run ended without the expected error (sample " << expected_.error->sample << ")");
      SOAK_CHECK(!pipeline.next().has_value(), "next() gave a batch after the end");
      const PipelineStats stats = pipeline.stats();
      SOAK_CHECK(stats.batches == sequence, "stats().batches is " << stats.batches << ", " << sequence << " delivered");
      uint64_t samples = 0;
      for (uint64_t j = first_batch; j < global; ++j) samples += expected_.batches[j].samples.size();
      SOAK_CHECK(stats.samples == samples, "stats().samples is " << stats.samples << ", expected " << samples);
      SOAK_CHECK(stats.pool.leased_bytes == 0, "a slab is still leased at the end of the run");
      SOAK_CHECK(stats.pool.waits == 0, "pack waited " << stats.pool.waits << " times for a slab");
      check_skips(stats, start, first_batch, global, true);
      retire(built);
      let_go(0);
      break;
    }

    // A stop: save where the run stands, tear the pipeline down in one of several ways, go on. (A
    // pipeline closed from another thread may have met its end first: the next one then delivers
    // nothing, or the error.)
    SOAK_CHECK(!last_segment, "the last segment stopped without an end");
    state = now;
    switch (segment.stop) {
      case StopStyle::kClose: pipeline.close(); break;
      case StopStyle::kLetItFill: std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000)); break;
      default: break;
    }
    if (segment.stop == StopStyle::kClose || closed_by_thread) {
      SOAK_CHECK(!pipeline.next().has_value(), "next() gave a batch after close()");
      check_skips(pipeline.stats(), start, first_batch, global, false);
    }
    if (segment.stop == StopStyle::kOverlap) {
      lingering.emplace(std::move(built));  // still running (and filling up) while the next one starts
    } else {
      retire(built);
    }
    let_go(0);
  }
  retire_lingering();
}

// ---------------------------------------------------------------------------------------------
// The self-test of the watchdog: a pipeline whose source never returns a read.

class StuckSource : public Source {
 public:
  StuckSource() {
    FieldSpec spec;
    spec.name = "x";
    spec.dtype = at::kFloat;
    spec.shape = {4};
    specs_.push_back(spec);
  }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  uint64_t size() const override { return 64; }
  EncodedSample read(uint64_t) const override {
    std::unique_lock lock(mutex_);
    never_.wait(lock, [] { return false; });  // blocks until the watchdog ends the process
    return {};
  }
  std::string describe() const override { return "a source whose reads never return"; }

 private:
  std::vector<FieldSpec> specs_;
  mutable std::mutex mutex_;
  mutable std::condition_variable never_;
};

// ---------------------------------------------------------------------------------------------

void write_json(const Settings& settings, bool passed) {
  if (settings.json.empty()) return;
  const double seconds = seconds_since_start();
  char hostname[256] = {};
  (void)::gethostname(hostname, sizeof hostname - 1);
  std::ostringstream out;
  out << "{\n"
      << "  \"program\": \"ferry_soak\",\n"
      << "  \"seed\": " << settings.seed << ",\n"
      << "  \"device\": \"" << settings.device << "\",\n"
      << "  \"host\": \"" << hostname << "\",\n"
      << "  \"seconds\": " << seconds << ",\n"
      << "  \"configs\": " << counters.rounds.load() << ",\n"
      << "  \"pipelines\": " << counters.pipelines.load() << ",\n"
      << "  \"batches\": " << counters.batches.load() << ",\n"
      << "  \"samples\": " << counters.samples.load() << ",\n"
      << "  \"bytes\": " << counters.bytes.load() << ",\n"
      << "  \"batches_per_second\": " << (seconds > 0 ? counters.batches.load() / seconds : 0.0) << ",\n"
      << "  \"mismatches\": " << counters.mismatches.load() << ",\n"
      << "  \"stalls\": " << counters.stalls.load() << ",\n"
      << "  \"errors_expected\": " << counters.errors_expected.load() << ",\n"
      << "  \"skipped_counted\": " << counters.skipped_counted.load() << ",\n"
      << "  \"resumes\": " << counters.resumes.load() << ",\n"
      << "  \"resident_mb_at_end\": " << resident_mb() << ",\n"
      << "  \"configs_by_kind\": {\"on_error_fail\": " << counters.on_error_fail.load()
      << ", \"skip_refill\": " << counters.skip_refill.load() << ", \"skip_replace\": " << counters.skip_replace.load()
      << ", \"with_faults\": " << counters.with_faults.load() << ", \"with_stops\": " << counters.with_stops.load()
      << ", \"several_ranks\": " << counters.several_ranks.load() << ", \"shuffled\": " << counters.shuffled.load()
      << ", \"with_cache\": " << counters.with_cache.load() << ", \"via_config\": " << counters.via_config.load()
      << ", \"endless_epochs\": " << counters.endless_epochs.load()
      << ", \"epoch_without_batch\": " << counters.epoch_without_batch.load() << "},\n"
      << "  \"passed\": " << (passed ? "true" : "false") << "\n"
      << "}\n";
  const std::string text = out.str();
  const std::string temporary = settings.json + ".tmp";
  if (FILE* file = std::fopen(temporary.c_str(), "w")) {
    std::fwrite(text.data(), 1, text.size(), file);
    std::fclose(file);
    std::rename(temporary.c_str(), settings.json.c_str());
  }
}

int soak_main(int argc, char** argv) {
  const Settings settings = parse_settings(argc, argv);
  FerryLog log;
  if (!settings.ferry_stderr && !settings.self_test_stall) log.open();
  say("soak: seed " + std::to_string(settings.seed) + (settings.seed_drawn ? " (drawn for this run)" : "") +
      ", device " + settings.device + ", " +
      (settings.batches != 0 ? std::to_string(settings.batches) + " batches" : std::string("no batch limit")) + ", " +
      (settings.seconds != 0 ? std::to_string(settings.seconds).substr(0, 6) + " s" : std::string("no time limit")) +
      ", stall limit " + std::to_string(settings.stall_seconds).substr(0, 5) + " s; repeat with --seed " +
      std::to_string(settings.seed) + (log.path.empty() ? "" : "; ferry's stderr goes to " + log.path) + "\n");

  Watchdog::Options watch;
  watch.stall = std::chrono::milliseconds(static_cast<int64_t>(settings.stall_seconds * 1000));
  watch.fd = 1;
  watch.tick = std::chrono::milliseconds(static_cast<int64_t>(std::max(0.5, settings.progress_seconds) * 1000));
  watch.on_tick = [] { say(progress_line()); };
  watch.on_stall = [&settings] {
    counters.stalls.fetch_add(1);
    say(progress_line());
    write_json(settings, false);
  };
  Watchdog dog(std::move(watch));
  watchdog = &dog;

  if (settings.self_test_stall) {
    dog.set_activity("the self-test: a pipeline over a source whose reads never return");
    PipelineOptions options;
    options.device = settings.device;
    options.decode_threads = 2;
    options.batch_size = 4;
    Pipeline pipeline = make_pipeline(std::make_shared<StuckSource>(), options);
    say("soak: self-test: waiting in next() for a batch that never comes; the watchdog must fire\n");
    (void)pipeline.next();
    say("soak: self-test: next() returned: the watchdog did not fire\n");
    return 1;
  }

  uint64_t round = settings.only_round.value_or(0);
  while (true) {
    if (settings.batches != 0 && counters.batches.load() >= settings.batches) break;
    if (settings.seconds != 0 && seconds_since_start() >= settings.seconds) break;
    if (counters.mismatches.load() >= settings.max_failures) {
      say("soak: stopping after " + std::to_string(counters.mismatches.load()) + " failed rounds\n");
      break;
    }
    log.clear();
    std::optional<Round> drawn;
    try {
      drawn = draw_round(settings.seed, round, settings.device);
      dog.set_activity(drawn->describe());
      moved();
      const SkipMode mode = drawn->mode();
      (mode == SkipMode::kFail     ? counters.on_error_fail
       : mode == SkipMode::kRefill ? counters.skip_refill
                                   : counters.skip_replace)
          .fetch_add(1);
      if (!drawn->data.failing_reads.empty() || !drawn->data.corrupted.empty()) counters.with_faults.fetch_add(1);
      if (!drawn->stops.empty()) counters.with_stops.fetch_add(1);
      if (drawn->world_size > 1) counters.several_ranks.fetch_add(1);
      if (drawn->order != OrderKind::kSequential) counters.shuffled.fetch_add(1);
      if (drawn->options.cache.enabled()) counters.with_cache.fetch_add(1);
      if (drawn->via_config) counters.via_config.fetch_add(1);
      if (drawn->options.epochs > 3) counters.endless_epochs.fetch_add(1);
      RoundRunner(*drawn).run();
    } catch (const std::exception& e) {
      counters.mismatches.fetch_add(1);
      std::string what = e.what();
      if (dynamic_cast<const Mismatch*>(&e) == nullptr) what = "unexpected exception: " + what;
      say("\nsoak: MISMATCH in " + (drawn ? drawn->describe() : "round " + std::to_string(round)) +
          "\nsoak:   " + what + "\nsoak:   repeat: ferry_soak --seed " + std::to_string(settings.seed) + " --round " +
          std::to_string(round) + " --device " + settings.device + "\n");
      const std::string tail = log.tail();
      if (!tail.empty()) say("soak:   ferry's stderr in that round:\n" + tail + "\n");
    }
    counters.rounds.fetch_add(1);
    if (settings.only_round) break;
    ++round;
  }
  dog.stop();
  watchdog = nullptr;
  const bool passed = counters.mismatches.load() == 0 && counters.stalls.load() == 0;
  say(progress_line());
  say(std::string("soak: ") + (passed ? "PASSED" : "FAILED") + ": " + std::to_string(counters.rounds.load()) +
      " configs, " + std::to_string(counters.batches.load()) + " batches, " +
      format_decimal_bytes(static_cast<double>(counters.bytes.load())) + " checked, " +
      std::to_string(counters.mismatches.load()) + " mismatches, " + std::to_string(counters.stalls.load()) +
      " stalls, in " + std::to_string(seconds_since_start()).substr(0, 7) + " s (seed " +
      std::to_string(settings.seed) + ", device " + settings.device + ")\n");
  write_json(settings, passed);
  if (passed) log.remove();
  return passed ? 0 : 1;
}

}  // namespace
}  // namespace ferry::soak

int main(int argc, char** argv) { return ferry::soak::soak_main(argc, argv); }
