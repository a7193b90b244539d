#include "cli/progress_line.h"

#include <unistd.h>

namespace ferry::cli {

ProgressLine::ProgressLine(std::FILE* out, std::optional<uint64_t> total_batches, StatsConfig::Progress mode,
                           std::chrono::milliseconds interval)
    : out_(out),
      total_(total_batches),
      enabled_(mode != StatsConfig::Progress::kOff),
      terminal_(mode == StatsConfig::Progress::kLive ||
                (mode == StatsConfig::Progress::kAuto && isatty(fileno(out)) != 0)),
      every_(terminal_ ? std::chrono::milliseconds(200) : std::chrono::steady_clock::duration(interval)),
      last_(std::chrono::steady_clock::now()) {}

void ProgressLine::update(const PipelineStats& stats) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < every_) return;
  last_ = now;
  print(stats, false);
}

void ProgressLine::finish(const PipelineStats& stats) {
  if (enabled_ && terminal_) {
    print(stats, true);
    std::fputc('\n', out_);
  }
}

void ProgressLine::print(const PipelineStats& stats, bool final) {
  const double seconds = stats.elapsed_seconds > 0 ? stats.elapsed_seconds : 1e-9;
  const double samples_per_second = static_cast<double>(stats.samples) / seconds;
  const double gigabytes_per_second = static_cast<double>(stats.bytes) / seconds / 1e9;
  char batches[64];
  if (total_) {
    std::snprintf(batches, sizeof batches, "%llu/%llu", static_cast<unsigned long long>(stats.batches),
                  static_cast<unsigned long long>(*total_));
  } else {
    std::snprintf(batches, sizeof batches, "%llu", static_cast<unsigned long long>(stats.batches));
  }
  char eta[32] = "";
  if (total_ && stats.batches > 0 && !final) {
    const double left =
        seconds * static_cast<double>(*total_ - std::min(*total_, stats.batches)) / static_cast<double>(stats.batches);
    std::snprintf(eta, sizeof eta, "  ETA %.0fs", left);
  }
  std::fprintf(out_, "%sferry: batch %s  %.0f samples/s  %.2f GB/s to %s%s%s", terminal_ ? "\r\033[K" : "", batches,
               samples_per_second, gigabytes_per_second, stats.device.c_str(), eta, terminal_ ? "" : "\n");
  std::fflush(out_);
}

}  // namespace ferry::cli
