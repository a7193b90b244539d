#include "cli/run_report.h"

#include <algorithm>

namespace ferry::cli {
namespace {

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int unit = 0;
  while (bytes >= 1000 && unit < 4) {
    bytes /= 1000;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", bytes, units[unit]);
  return text;
}

}  // namespace

void print_report(std::FILE* out, const std::string& title, const PipelineStats& stats) {
  const double seconds = std::max(stats.elapsed_seconds, 1e-9);
  std::fprintf(out, "%s\n", title.c_str());
  std::fprintf(out, "  delivered  %llu batches, %llu samples, %s in %.2f s\n",
               static_cast<unsigned long long>(stats.batches), static_cast<unsigned long long>(stats.samples),
               bytes_text(static_cast<double>(stats.bytes)).c_str(), seconds);
  std::fprintf(out, "  rate       %.0f samples/s, %.1f batches/s, %.3f GB/s to %s\n",
               static_cast<double>(stats.samples) / seconds, static_cast<double>(stats.batches) / seconds,
               static_cast<double>(stats.bytes) / seconds / 1e9, stats.device.c_str());
  if (stats.batches > 0) {
    std::fprintf(out, "  consumer   waited %.3f ms per batch (%.1f%% of the run)\n",
                 stats.consumer_wait_seconds * 1e3 / static_cast<double>(stats.batches),
                 100.0 * stats.consumer_wait_seconds / seconds);
  }
  std::fprintf(out, "  %-11s %10s %10s %8s\n", "stage", "items", "busy s", "busy %");
  for (const StageStats& stage : stats.stages) {
    // Decode's busy time sums over its threads: its share is of all decode threads' time.
    const double capacity = seconds * static_cast<double>(stage.name == "decode" ? std::max<size_t>(1, stats.decode_threads) : 1);
    std::fprintf(out, "  %-11s %10llu %10.3f %7.1f%%\n", stage.name.c_str(), static_cast<unsigned long long>(stage.items),
                 stage.busy_seconds, 100.0 * stage.busy_seconds / capacity);
  }
  const PinnedPoolStats& pool = stats.pool;
  std::fprintf(out, "  pool       %zu slabs x %s (%s), peak %s leased, %llu leases, %llu waits for a slab, %llu cudaHostAlloc calls (all at start-up)\n",
               pool.slab_count, bytes_text(static_cast<double>(pool.slab_bytes)).c_str(),
               pool.pinned ? "pinned" : "pageable", bytes_text(static_cast<double>(pool.peak_bytes)).c_str(),
               static_cast<unsigned long long>(pool.leases), static_cast<unsigned long long>(pool.waits),
               static_cast<unsigned long long>(pool.host_alloc_calls));
  std::fprintf(out, "  threads    %zu decode, prefetch %zu, at most %zu batches waited for the consumer\n",
               stats.decode_threads, stats.prefetch, stats.ready_queue_peak);
}

}  // namespace ferry::cli
