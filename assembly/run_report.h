#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/pipeline/pipeline_stats.h"

namespace ferry {

/// The machine a run ran on (this_host()).
struct HostInfo {
  struct Device {
    int index = 0;
    std::string name;
    uint64_t memory_bytes = 0;
  };
  std::string name;      // the host name
  unsigned cpus = 0;     // hardware threads
  std::string build;     // ferry's build: GPU or CPU, and why
  std::string libtorch;  // its version
  std::string cuda_runtime;
  std::string cuda_driver;
  std::string malloc;           // malloc_name(): the process's malloc and its version
  std::vector<Device> devices;  // the visible CUDA devices
};

/// This machine: host name, cores, versions, devices (their properties only: no device gets a CUDA
/// context). Found on the first call and kept; never throws.
HostInfo this_host();

/// What the command knows about a run besides the pipeline's stats.
struct RunInfo {
  std::string ferry_version;  // FERRY_VERSION
  std::string config;         // the config file's path, or "<built-in configs/demo.yaml>"
  std::string source;         // the source's description (Source::describe())
  std::string device;         // the device asked for ("auto", "cuda:1"); empty: as resolved
  bool interrupted = false;   // stopped early (SIGINT): counts cover the part that ran
  bool started = true;        // false: a signal stopped the run before its pipeline was made (the stats are empty)
  int exit_status = 0;        // what the command exits with
  std::string error;          // why the run failed (ferry::Error's message); empty when it did not
  HostInfo host;
  /// The config as it ran: every key it set, by key path ("source.fields[0].dtype"), as written in
  /// the file or by --set (Config::values).
  std::map<std::string, std::string, std::less<>> config_keys;
  /// A group's devices (transfer.devices), each its own stats, in device order; the report's stats are
  /// then merged_stats() of them. Empty for one device.
  std::vector<PipelineStats> devices;
};

/// The report at the end of `ferry run`, as text: totals, rates, the bottleneck in one line, a
/// per-stage table of where time went, queue occupancy, the consumer's waits, the pinned pool's
/// use and skipped samples. Pure; allocates. (Its JSON twin is write_report_json.)
std::string report_text(const std::string& title, const PipelineStats& stats);
/// The same with the run's identity (config, source, device asked for, interruption) after the title.
std::string report_text(const std::string& title, const RunInfo& info, const PipelineStats& stats);

/// Writes report_text() to `out`. Not thread-safe with other writers of `out`.
void print_report(std::FILE* out, const std::string& title, const PipelineStats& stats);
void print_report(std::FILE* out, const std::string& title, const RunInfo& info, const PipelineStats& stats);

/// The report as one JSON document, as docs/report.md describes and docs/report.schema.json
/// checks: keys always in the same order, every number finite. Bump kReportFormatVersion when a
/// field changes meaning or goes away (adding a field is a change too: the schema is closed).
inline constexpr int kReportFormatVersion = 14;
void write_report_json(std::ostream& out, const RunInfo& info, const PipelineStats& stats);

}  // namespace ferry
