#include "ferry/assembly/run_report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdlib>
#include <thread>

#include "ferry/build_config.h"
#include "ferry/io/util/units.h"
#include "ferry/pipeline/cuda_device.h"
#include "ferry/pipeline/malloc_name.h"

#include "ferry/assembly/json_writer.h"

namespace ferry {

HostInfo this_host() {
  // Once per process: Python may ask for a report after every epoch. Only properties are read, so no
  // device gets a CUDA context it would not otherwise have.
  static const HostInfo host = [] {
    HostInfo found;
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) == 0) found.name = name;
    found.cpus = std::thread::hardware_concurrency();
    found.build = build_description();
    found.libtorch = FERRY_TORCH_VERSION;
    found.cuda_runtime = cuda_runtime_version();
    found.cuda_driver = cuda_driver_version();
    found.malloc = malloc_name();
    for (const CudaDeviceInfo& device : cuda_devices()) {
      found.devices.push_back(HostInfo::Device{device.index, device.name, device.total_bytes});
    }
    return found;
  }();
  return host;
}

namespace {

// printf onto the end of `text`.
__attribute__((format(printf, 2, 3))) void appendf(std::string& text, const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  const int length = std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  if (length < 0) return;
  if (static_cast<size_t>(length) < sizeof buffer) {
    text.append(buffer, static_cast<size_t>(length));
    return;
  }
  std::string large(static_cast<size_t>(length) + 1, '\0');  // a long source description or reason
  va_start(args, format);
  std::vsnprintf(large.data(), large.size(), format, args);
  va_end(args);
  large.pop_back();
  text += large;
}

// Rates and ratios the report derives: a snapshot taken at once (no time, no batch) gives 0, never
// NaN or infinity (JSON cannot hold them, and "inf samples/s" tells the user nothing).
double per(double amount, double over) { return over > 0.0 && std::isfinite(over) ? amount / over : 0.0; }

// Each part of a mixture's share of the samples the parts gave (0 before any), in order.
std::vector<double> part_shares(const std::vector<SourcePartStats>& parts) {
  uint64_t mixed = 0;
  for (const SourcePartStats& part : parts) mixed += part.samples;
  std::vector<double> shares;
  for (const SourcePartStats& part : parts) {
    shares.push_back(per(static_cast<double>(part.samples), static_cast<double>(mixed)));
  }
  return shares;
}

std::string plural(uint64_t count, const char* one, const char* many) {
  return std::to_string(count) + " " + (count == 1 ? one : many);
}

// Images a second as the text report says them: "55.1k images/s", or "not measured".
std::string format_rate(double per_second) {
  if (!(per_second > 0.0) || !std::isfinite(per_second)) return "not measured";
  char text[48];
  std::snprintf(text, sizeof text, "%.1fk images/s", per_second / 1000.0);
  return text;
}

std::string items_text(uint64_t count, const std::string& unit) {
  return unit.empty() ? std::to_string(count) : std::to_string(count) + " " + unit;
}

void append_stage_row(std::string& text, const StageStats& stage) {
  appendf(text, "  %-11s %7zu %14s %14s %9.3f %7.1f%% %10.1f%% %12.1f%%\n", stage.name.c_str(), stage.threads,
          items_text(stage.items_in, stage.in_unit).c_str(), items_text(stage.items_out, stage.out_unit).c_str(),
          stage.busy_seconds, 100.0 * stage.busy_share(), 100.0 * stage.waiting_upstream_share(),
          100.0 * stage.blocked_downstream_share());
}

const StageStats* device_stage(const PipelineStats& stats, const std::string& name) {
  for (const StageStats& stage : stats.stages) {
    if (stage.name == name) return &stage;
  }
  return nullptr;
}

void append_body(std::string& text, const PipelineStats& stats) {
  const double seconds = stats.elapsed_seconds;
  appendf(text, "  delivered  %llu batches, %llu samples, %s in %.2f s\n",
          static_cast<unsigned long long>(stats.batches), static_cast<unsigned long long>(stats.samples),
          format_decimal_bytes(static_cast<double>(stats.bytes)).c_str(), seconds);
  appendf(text, "  rate       %.0f samples/s, %.1f batches/s, %.3f GB/s to %s\n",
          per(static_cast<double>(stats.samples), seconds), per(static_cast<double>(stats.batches), seconds),
          per(static_cast<double>(stats.bytes), seconds) / 1e9, stats.device.c_str());
  if (stats.batches >= 2 && stats.first_batch_samples != 0) {
    appendf(text, "  start      first batch after %.3f s; %.0f samples/s after it\n", stats.first_batch_seconds,
            stats.samples_per_second_after_first_batch());
  }
  appendf(text, "  bottleneck %s\n", bottleneck_summary(stats).c_str());
  appendf(text, "  per batch  %s\n", per_batch_summary(stats).c_str());
  appendf(text, "  batch path %s\n", batch_path_summary(stats).c_str());

  appendf(text, "  %-11s %7s %14s %14s %9s %8s %11s %13s\n", "stage", "threads", "in", "out", "busy s", "busy %",
          "upstream %", "downstream %");
  if (!stats.planner.name.empty()) append_stage_row(text, stats.planner);
  for (const StageStats& stage : stats.stages) append_stage_row(text, stage);
  text +=
      "             (busy: working; upstream: waiting for input; downstream: blocked, i.e. pack waiting for\n"
      "              a pinned slab, event-wait for room in the ready queue, plan for a free prefetch token)\n";

  if (stats.batches > 0) {
    appendf(text,
            "  consumer   waited %.3f ms per batch (%.1f%% of the run); found no batch ready %llu of %llu times\n",
            stats.consumer_wait_per_batch_seconds() * 1e3, 100.0 * stats.consumer_wait_share(),
            static_cast<unsigned long long>(stats.consumer_waits), static_cast<unsigned long long>(stats.batches));
  } else {
    appendf(text, "  consumer   took no batch; waited %.3f s\n", stats.consumer_wait_seconds);
  }
  appendf(text, "  in flight  mean %.1f, peak %zu of %zu batches (prefetch), all tokens in use %.1f%% of the time\n",
          stats.in_flight.mean, stats.in_flight.peak, stats.in_flight.capacity,
          100.0 * std::min(1.0, per(stats.in_flight.full_seconds, seconds)));
  appendf(text, "  ready      mean %.1f, peak %zu of %zu batches waiting for the consumer, full %.1f%% of the time\n",
          stats.ready_queue.mean, stats.ready_queue.peak, stats.ready_queue.capacity,
          100.0 * std::min(1.0, per(stats.ready_queue.full_seconds, seconds)));

  const PinnedPoolStats& pool = stats.pool;
  appendf(text, "  pool       %zu slabs x %s (%s), peak %s leased, %s\n", pool.slab_count,
          format_decimal_bytes(static_cast<double>(pool.slab_bytes)).c_str(), pool.pinned ? "pinned" : "pageable",
          format_decimal_bytes(static_cast<double>(pool.peak_bytes)).c_str(),
          plural(pool.leases, "lease", "leases").c_str());
  appendf(text, "             %s (%.3f s), %s at start-up, %s after start-up\n",
          plural(pool.waits, "wait for a slab", "waits for a slab").c_str(), pool.wait_seconds,
          plural(pool.host_alloc_calls, "cudaHostAlloc call", "cudaHostAlloc calls").c_str(),
          plural(pool.allocations_after_start, "allocation", "allocations").c_str());
  if (stats.placed_bytes > 0) {  // Note [placing samples]
    appendf(text, "             %s placed in the slabs by decode (%.1f%% of the bytes), the rest packed\n",
            format_decimal_bytes(static_cast<double>(stats.placed_bytes)).c_str(),
            100.0 * std::min(1.0, per(static_cast<double>(stats.placed_bytes), static_cast<double>(stats.bytes))));
  }
  if (const PipelineStats::GpuDecodeStats& gpu = stats.gpu_decode; gpu.enabled) {
    const uint64_t images = gpu.gpu_images + gpu.cpu_images;
    appendf(text,
            "  jpeg       %s on the GPU (%.0f%%), %s on the CPU; the GPU groups took %.3f s (summed over threads)\n",
            plural(gpu.gpu_images, "image", "images").c_str(),
            images != 0 ? 100.0 * static_cast<double>(gpu.gpu_images) / static_cast<double>(images) : 0.0,
            plural(gpu.cpu_images, "image", "images").c_str(), gpu.gpu_group_seconds);
    if (!gpu.unavailable.empty()) {
      appendf(text, "             the GPU decoder did not start: %s\n", gpu.unavailable.c_str());
    } else if (gpu.ready_seconds > 0.0) {
      appendf(text,
              "             the GPU decoder was ready after %.3f s and busy %.3f s (%.0f%% of the run); its %zu "
              "decoding states in use %.0f%% of the time\n",
              gpu.ready_seconds, gpu.busy_seconds,
              stats.elapsed_seconds > 0.0 ? 100.0 * gpu.busy_seconds / stats.elapsed_seconds : 0.0, gpu.states,
              100.0 * stats.gpu_decoder_share());
    } else {
      appendf(text, "             the GPU decoder was still starting\n");
    }
    // Note [auto: the faster decoder]
    const std::string cpu_rate = format_rate(gpu.auto_cpu_images_per_second);
    const std::string gpu_rate = format_rate(gpu.auto_gpu_images_per_second);
    if (gpu.auto_choice == "gpu" || gpu.auto_choice == "cpu") {
      appendf(text, "             auto chose %s: the GPU alone %s, the CPU threads %s while it started\n",
              gpu.auto_choice == "gpu" ? "the GPU" : "the CPU threads", gpu_rate.c_str(), cpu_rate.c_str());
    } else if (gpu.auto_choice == "trying") {
      appendf(text, "             auto: the GPU decodes while its rate is measured (the CPU threads: %s)\n",
              cpu_rate.c_str());
    } else if (gpu.auto_choice == "warming") {
      appendf(text, "             auto: the CPU threads decode while the GPU decoder starts\n");
    } else if (gpu.auto_choice == "mixed") {
      appendf(text, "             auto: the devices chose differently (in all: the GPU %s, the CPU threads %s)\n",
              gpu_rate.c_str(), cpu_rate.c_str());
    }
  }
  for (const UserCodeStats& code : stats.user_code) {
    const std::string where =
        code.processes > 0 ? plural(code.processes, "worker process", "worker processes") : "the decode threads";
    // Worker processes take groups of samples a request: how many a round trip carried.
    const std::string requests =
        code.processes > 0 ? " in " + plural(code.requests, "request", "requests") : std::string();
    const double busy = code.busy_share(stats.elapsed_seconds, stats.decode_threads);
    appendf(text, "  user code  %s on %s: %s%s, busy %.3f s (%.0f%%)%s\n", code.what.c_str(), where.c_str(),
            plural(code.calls, "sample", "samples").c_str(), requests.c_str(), code.busy_seconds, 100.0 * busy,
            code.replaced ? (", " + plural(code.replaced, "worker", "workers") + " replaced").c_str() : "");
  }
  // A mixture: the share of the samples each part gave, beside the share its weight asks for.
  const std::vector<double> shares = part_shares(stats.source_parts);
  for (size_t k = 0; k < shares.size(); ++k) {
    const SourcePartStats& part = stats.source_parts[k];
    appendf(text, "  mixture    %s: %s, %.1f%% (weight %.1f%%)\n", part.what.c_str(),
            plural(part.samples, "sample", "samples").c_str(), 100.0 * shares[k], 100.0 * part.weight);
  }
  if (const RemoteDataStats& remote = stats.remote; remote.used) {
    appendf(text, "  remote     fetched %s, %s (%s over the network, %s, %s); %s read from the cache\n",
            plural(remote.fetches, "shard", "shards").c_str(),
            format_decimal_bytes(static_cast<double>(remote.fetched_bytes)).c_str(),
            format_decimal_bytes(static_cast<double>(remote.network_bytes)).c_str(),
            plural(remote.requests, "request", "requests").c_str(), plural(remote.retries, "retry", "retries").c_str(),
            format_decimal_bytes(static_cast<double>(remote.from_cache_bytes)).c_str());
    appendf(text,
            "             waited %.3f ms a batch for shards (%.1f%% of decode's time); cache %s, at most %s, %s\n",
            stats.fetch_wait_per_batch_seconds() * 1e3, 100.0 * stats.fetch_wait_share(), remote.cache_dir.c_str(),
            format_decimal_bytes(static_cast<double>(remote.max_bytes)).c_str(),
            plural(remote.evictions, "shard dropped", "shards dropped").c_str());
  }
  if (const DatasetCacheStats& cache = stats.cache; cache.enabled) {
    appendf(text, "  cache      %s memory on %s: %s of %s, %s kept%s\n", cache.memory.c_str(), cache.location.c_str(),
            format_decimal_bytes(static_cast<double>(cache.used_bytes)).c_str(),
            format_decimal_bytes(static_cast<double>(cache.capacity_bytes)).c_str(),
            plural(cache.samples, "sample", "samples").c_str(),
            cache.not_kept ? (", " + plural(cache.not_kept, "sample", "samples") + " did not fit").c_str() : "");
    appendf(text, "             %s hits, %s misses, %s served wholly from it; gather %.1f us per batch (%s)\n",
            std::to_string(cache.hits).c_str(), std::to_string(cache.misses).c_str(),
            plural(cache.hit_epochs, "epoch", "epochs").c_str(), cache.gather_seconds_per_batch() * 1e6,
            plural(cache.gathers, "batch", "batches").c_str());
    if (cache.moves) {
      appendf(text, "             moved %s, the last in %.3f s\n", plural(cache.moves, "time", "times").c_str(),
              cache.last_move_seconds);
    }
  }
  const std::string shared = stats.decode_threads_shared_by > 1 ? " (auto: this machine's cores shared by " +
                                                                      std::to_string(stats.decode_threads_shared_by) +
                                                                      " processes of the job, LOCAL_WORLD_SIZE)"
                                                                : "";
  appendf(text, "  settings   %s%s, prefetch %zu\n",
          plural(stats.decode_threads, "decode thread", "decode threads").c_str(), shared.c_str(), stats.prefetch);

  if (stats.skipped_samples == 0) {
    text += "  skipped    none\n";
    return;
  }
  appendf(text, "  skipped    %s:\n", plural(stats.skipped_samples, "sample", "samples").c_str());
  for (const SkippedSample& skipped : stats.skipped) {
    appendf(text, "    sample %llu%s%s%s in %s: %s\n", static_cast<unsigned long long>(skipped.index),
            skipped.key.empty() ? "" : " (", skipped.key.c_str(), skipped.key.empty() ? "" : ")", skipped.stage.c_str(),
            skipped.reason.c_str());
  }
  const uint64_t listed = static_cast<uint64_t>(stats.skipped.size());
  if (stats.skipped_samples > listed) {
    appendf(text, "    ... and %llu more\n", static_cast<unsigned long long>(stats.skipped_samples - listed));
  }
}

// Stats are measured, so a negative or non-finite time is impossible but cheap to rule out: the
// schema promises numbers >= 0.
double seconds_value(double seconds) { return std::isfinite(seconds) && seconds > 0.0 ? seconds : 0.0; }

void write_stage_json(JsonWriter& json, const StageStats& stage, const PipelineStats& stats) {
  json.begin_object()
      .key("name")
      .value(stage.name)
      .key("threads")
      .value(stage.threads)
      .key("items_in")
      .value(stage.items_in)
      .key("in_unit")
      .value(stage.in_unit)
      .key("items_out")
      .value(stage.items_out)
      .key("out_unit")
      .value(stage.out_unit)
      .key("capacity_seconds")
      .value(seconds_value(stage.capacity_seconds))
      .key("busy_seconds")
      .value(seconds_value(stage.busy_seconds))
      .key("busy_share")
      .value(stage.busy_share())
      .key("busy_per_batch_seconds")
      .value(seconds_value(stats.busy_per_batch_seconds(stage)))
      .key("waiting_upstream_seconds")
      .value(seconds_value(stage.waiting_upstream_seconds))
      .key("waiting_upstream_share")
      .value(stage.waiting_upstream_share())
      .key("blocked_downstream_seconds")
      .value(seconds_value(stage.blocked_downstream_seconds))
      .key("blocked_downstream_share")
      .value(stage.blocked_downstream_share())
      .end_object();
}

void write_occupancy_json(JsonWriter& json, const OccupancyStats& occupancy) {
  json.begin_object()
      .key("mean")
      .value(occupancy.mean)
      .key("peak")
      .value(occupancy.peak)
      .key("capacity")
      .value(occupancy.capacity)
      .key("full_seconds")
      .value(seconds_value(occupancy.full_seconds))
      .end_object();
}

// "cpu", or the name of the CUDA device `device` ("cuda:1") names, as `host` lists it.
std::string device_name(const HostInfo& host, const std::string& device) {
  if (device.rfind("cuda:", 0) == 0) {
    const int index = std::atoi(device.c_str() + 5);
    for (const HostInfo::Device& candidate : host.devices) {
      if (candidate.index == index) return candidate.name;
    }
  }
  return device;
}

}  // namespace

std::string report_text(const std::string& title, const PipelineStats& stats) {
  std::string text = title + "\n";
  append_body(text, stats);
  return text;
}

std::string report_text(const std::string& title, const RunInfo& info, const PipelineStats& stats) {
  std::string text = title + "\n";
  if (!info.config.empty()) appendf(text, "  config     %s\n", info.config.c_str());
  if (!info.source.empty()) appendf(text, "  source     %s\n", info.source.c_str());
  if (!info.started) {  // nothing ran: no counts to show
    appendf(text, "  stopped    interrupted while starting: no batch was delivered\n");
    return text;
  }
  if (info.interrupted) appendf(text, "  stopped    interrupted: the counts cover the part that ran\n");
  if (!info.error.empty()) appendf(text, "  failed     %s\n", info.error.c_str());
  append_body(text, stats);
  // A group: each device's share, and how long its completion thread waited on its copies (the copy
  // engine busy for that device, as the host sees it).
  for (const PipelineStats& device : info.devices) {
    const StageStats* copy = device_stage(device, "event-wait");
    appendf(text, "  device     %s: %llu batches, %.3f GB/s, copies waited on %.1f%% of the run\n",
            device.device.c_str(), static_cast<unsigned long long>(device.batches),
            per(static_cast<double>(device.bytes), device.elapsed_seconds) / 1e9,
            copy ? 100.0 * per(copy->busy_seconds, device.elapsed_seconds) : 0.0);
  }
  return text;
}

void print_report(std::FILE* out, const std::string& title, const PipelineStats& stats) {
  std::fputs(report_text(title, stats).c_str(), out);
}

void print_report(std::FILE* out, const std::string& title, const RunInfo& info, const PipelineStats& stats) {
  std::fputs(report_text(title, info, stats).c_str(), out);
}

void write_report_json(std::ostream& out, const RunInfo& info, const PipelineStats& stats) {
  // Key order here is the documented order (docs/report.md); keep the two in step.
  const double seconds = seconds_value(stats.elapsed_seconds);
  JsonWriter json(out);
  json.begin_object();
  json.key("format").value("ferry-run-report");
  json.key("format_version").value(kReportFormatVersion);
  json.key("ferry_version").value(info.ferry_version);

  json.key("run")
      .begin_object()
      .key("config")
      .value(info.config)
      .key("source")
      .value(info.source)
      .key("device")
      .value(stats.device)
      .key("device_requested")
      .value(info.device.empty() ? stats.device : info.device)
      .key("device_name")
      .value(device_name(info.host, stats.device))
      .key("interrupted")
      .value(info.interrupted)
      .key("exit_status")
      .value(info.exit_status)
      .key("error")
      .value(info.error)
      .end_object();
  json.key("host")
      .begin_object()
      .key("name")
      .value(info.host.name)
      .key("cpus")
      .value(info.host.cpus)
      .key("build")
      .value(info.host.build)
      .key("libtorch")
      .value(info.host.libtorch)
      .key("cuda_runtime")
      .value(info.host.cuda_runtime)
      .key("cuda_driver")
      .value(info.host.cuda_driver)
      .key("malloc")
      .value(info.host.malloc)
      .key("devices")
      .begin_array();
  for (const HostInfo::Device& device : info.host.devices) {
    json.begin_object()
        .key("index")
        .value(device.index)
        .key("name")
        .value(device.name)
        .key("memory_bytes")
        .value(device.memory_bytes)
        .end_object();
  }
  json.end_array().end_object();
  json.key("config").begin_object();
  for (const auto& [key, value] : info.config_keys) json.key(key).value(value);
  json.end_object();
  json.key("settings")
      .begin_object()
      .key("decode_threads")
      .value(stats.decode_threads)
      .key("decode_threads_shared_by")
      .value(stats.decode_threads_shared_by)
      .key("prefetch")
      .value(stats.prefetch)
      .end_object();
  json.key("totals")
      .begin_object()
      .key("wall_seconds")
      .value(seconds)
      .key("batches")
      .value(stats.batches)
      .key("samples")
      .value(stats.samples)
      .key("bytes")
      .value(stats.bytes)
      .key("samples_per_second")
      .value(per(static_cast<double>(stats.samples), seconds))
      .key("batches_per_second")
      .value(per(static_cast<double>(stats.batches), seconds))
      .key("gigabytes_per_second")
      .value(per(static_cast<double>(stats.bytes), seconds) / 1e9)
      .key("seconds_per_batch")
      .value(seconds_value(stats.seconds_per_batch()))
      .key("batch_latency_seconds")
      .value(seconds_value(stats.batch_latency_seconds()))
      .key("first_batch_seconds")
      .value(seconds_value(stats.first_batch_seconds))
      .key("samples_per_second_after_first_batch")
      .value(stats.samples_per_second_after_first_batch())
      .end_object();
  json.key("devices").begin_array();
  for (const PipelineStats& device : info.devices) {
    const StageStats* submit = device_stage(device, "h2d");
    const StageStats* copy = device_stage(device, "event-wait");
    const double wall = seconds_value(device.elapsed_seconds);
    json.begin_object()
        .key("device")
        .value(device.device)
        .key("batches")
        .value(device.batches)
        .key("samples")
        .value(device.samples)
        .key("bytes")
        .value(device.bytes)
        .key("gigabytes_per_second")
        .value(per(static_cast<double>(device.bytes), wall) / 1e9)
        .key("h2d_busy_seconds")
        .value(seconds_value(submit ? submit->busy_seconds : 0.0))
        .key("copy_wait_seconds")
        .value(seconds_value(copy ? copy->busy_seconds : 0.0))
        .end_object();
  }
  json.end_array();
  json.key("bottleneck").value(bottleneck_summary(stats));
  json.key("per_batch").value(per_batch_summary(stats));
  const BatchPathStats& path = stats.batch_path;
  json.key("batch_path")
      .begin_object()
      .key("batches")
      .value(path.batches)
      .key("latency_seconds")
      .value(seconds_value(path.latency_seconds()))
      .key("legs")
      .begin_array();
  for (const BatchPathStats::Leg& leg : path.legs) {
    json.begin_object()
        .key("name")
        .value(leg.name)
        .key("waiting")
        .value(leg.waiting)
        .key("seconds")
        .value(seconds_value(leg.seconds))
        .key("seconds_per_batch")
        .value(seconds_value(path.seconds_per_batch(leg)))
        .end_object();
  }
  json.end_array().end_object();

  json.key("planner");
  write_stage_json(json, stats.planner, stats);
  json.key("stages").begin_array();
  for (const StageStats& stage : stats.stages) write_stage_json(json, stage, stats);
  json.end_array();

  json.key("consumer")
      .begin_object()
      .key("batches")
      .value(stats.batches)
      .key("wait_seconds")
      .value(seconds_value(stats.consumer_wait_seconds))
      .key("wait_per_batch_seconds")
      .value(seconds_value(stats.consumer_wait_per_batch_seconds()))
      .key("wait_share")
      .value(stats.consumer_wait_share())
      .key("waits")
      .value(stats.consumer_waits)
      .end_object();
  json.key("queues").begin_object();
  json.key("in_flight");
  write_occupancy_json(json, stats.in_flight);
  json.key("ready");
  write_occupancy_json(json, stats.ready_queue);
  json.end_object();

  const PinnedPoolStats& pool = stats.pool;
  json.key("pool")
      .begin_object()
      .key("pinned")
      .value(pool.pinned)
      .key("slab_bytes")
      .value(pool.slab_bytes)
      .key("slab_count")
      .value(pool.slab_count)
      .key("leases")
      .value(pool.leases)
      .key("peak_bytes")
      .value(pool.peak_bytes)
      .key("leased_bytes")
      .value(pool.leased_bytes)
      .key("pending_slabs")
      .value(pool.pending)
      .key("waits")
      .value(pool.waits)
      .key("wait_seconds")
      .value(seconds_value(pool.wait_seconds))
      .key("host_alloc_calls")
      .value(pool.host_alloc_calls)
      .key("allocations_after_start")
      .value(pool.allocations_after_start)
      .key("placed_bytes")
      .value(stats.placed_bytes)
      .end_object();

  if (const PipelineStats::GpuDecodeStats& gpu = stats.gpu_decode; gpu.enabled) {
    json.key("gpu_decode")
        .begin_object()
        .key("gpu_images")
        .value(gpu.gpu_images)
        .key("cpu_images")
        .value(gpu.cpu_images)
        .key("gpu_group_seconds")
        .value(seconds_value(gpu.gpu_group_seconds))
        .key("ready_seconds")
        .value(seconds_value(gpu.ready_seconds))
        .key("busy_seconds")
        .value(seconds_value(gpu.busy_seconds))
        .key("decoding_states")
        .value(static_cast<uint64_t>(gpu.states))
        .key("state_busy_seconds")
        .value(seconds_value(gpu.state_busy_seconds))
        .key("unavailable")
        .value(gpu.unavailable)
        .key("auto_choice")
        .value(gpu.auto_choice)
        .key("auto_cpu_images_per_second")
        .value(gpu.auto_cpu_images_per_second)
        .key("auto_gpu_images_per_second")
        .value(gpu.auto_gpu_images_per_second)
        .end_object();
  }
  if (!stats.user_code.empty()) {
    json.key("user_code").begin_array();
    for (const UserCodeStats& code : stats.user_code) {
      json.begin_object()
          .key("what")
          .value(code.what)
          .key("processes")
          .value(static_cast<uint64_t>(code.processes))
          .key("calls")
          .value(code.calls)
          .key("requests")
          .value(code.requests)
          .key("busy_seconds")
          .value(seconds_value(code.busy_seconds))
          .key("busy_share")
          .value(code.busy_share(stats.elapsed_seconds, stats.decode_threads))
          .key("replaced")
          .value(code.replaced)
          .end_object();
    }
    json.end_array();
  }
  if (const RemoteDataStats& remote = stats.remote; remote.used) {
    json.key("remote")
        .begin_object()
        .key("cache_dir")
        .value(remote.cache_dir)
        .key("max_bytes")
        .value(remote.max_bytes)
        .key("fetches")
        .value(remote.fetches)
        .key("fetched_bytes")
        .value(remote.fetched_bytes)
        .key("network_bytes")
        .value(remote.network_bytes)
        .key("from_cache_bytes")
        .value(remote.from_cache_bytes)
        .key("requests")
        .value(remote.requests)
        .key("retries")
        .value(remote.retries)
        .key("evictions")
        .value(remote.evictions)
        .key("wait_seconds")
        .value(remote.wait_seconds)
        .key("wait_per_batch_seconds")
        .value(stats.fetch_wait_per_batch_seconds())
        .key("wait_share")
        .value(stats.fetch_wait_share())
        .end_object();
  }
  if (!stats.source_parts.empty()) {
    const std::vector<double> shares = part_shares(stats.source_parts);
    json.key("source_parts").begin_array();
    for (size_t k = 0; k < shares.size(); ++k) {
      const SourcePartStats& part = stats.source_parts[k];
      json.begin_object()
          .key("source")
          .value(part.what)
          .key("weight")
          .value(part.weight)
          .key("samples")
          .value(part.samples)
          .key("share")
          .value(shares[k])
          .end_object();
    }
    json.end_array();
  }
  if (const DatasetCacheStats& cache = stats.cache; cache.enabled) {
    json.key("cache")
        .begin_object()
        .key("memory")
        .value(cache.memory)
        .key("location")
        .value(cache.location)
        .key("capacity_bytes")
        .value(cache.capacity_bytes)
        .key("used_bytes")
        .value(cache.used_bytes)
        .key("samples")
        .value(cache.samples)
        .key("not_kept")
        .value(cache.not_kept)
        .key("hits")
        .value(cache.hits)
        .key("misses")
        .value(cache.misses)
        .key("hit_epochs")
        .value(cache.hit_epochs)
        .key("gathers")
        .value(cache.gathers)
        .key("gather_seconds_per_batch")
        .value(seconds_value(cache.gather_seconds_per_batch()))
        .key("moves")
        .value(cache.moves)
        .key("last_move_seconds")
        .value(seconds_value(cache.last_move_seconds))
        .end_object();
  }

  json.key("skipped").begin_object();
  json.key("count").value(stats.skipped_samples);
  json.key("listed").begin_array();
  for (const SkippedSample& skipped : stats.skipped) {
    json.begin_object()
        .key("index")
        .value(skipped.index)
        .key("key")
        .value(skipped.key)
        .key("stage")
        .value(skipped.stage)
        .key("reason")
        .value(skipped.reason)
        .end_object();
  }
  json.end_array();
  json.key("not_listed").value(stats.skipped_samples - std::min<uint64_t>(stats.skipped_samples, stats.skipped.size()));
  json.end_object();

  json.end_object();
  out << '\n';
}

}  // namespace ferry
