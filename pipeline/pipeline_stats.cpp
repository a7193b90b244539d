#include "ferry/pipeline/pipeline_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ferry {
namespace {

// A stage that limits the pipeline works nearly all the time: the tokens keep its input queue
// non-empty. Half its capacity is far below that but far above what an idle stage shows, so
// the verdict does not flip on timing noise.
constexpr double kSaturated = 0.5;
// Below this wall time start-up (thread pools waking, first allocations) weighs as much as the
// work: an unsaturated verdict says so instead of guessing.
constexpr double kShortRunSeconds = 0.1;

// part / whole in [0, 1]; 0 for an empty or invalid whole (a snapshot taken at once, hand-made stats).
double share(double part, double whole) {
  if (!(whole > 0.0) || !std::isfinite(whole) || !std::isfinite(part)) return 0.0;
  return std::clamp(part / whole, 0.0, 1.0);
}

std::string percent(double fraction) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", 100.0 * fraction);
  return text;
}

std::string threads_text(size_t threads) { return std::to_string(threads) + (threads == 1 ? " thread" : " threads"); }

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g s", seconds);
  return text;
}

// A short span: microseconds below a millisecond, else milliseconds or seconds.
std::string micros_text(double seconds) {
  char text[32];
  if (seconds < 1e-3) {
    std::snprintf(text, sizeof text, "%.1f us", seconds * 1e6);
  } else if (seconds < 1.0) {
    std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.2f s", seconds);
  }
  return text;
}

std::string fixed_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

// The stages' busy time per batch, added up (decode's over all its threads): at most this much of a
// batch's way from plan to consumer is work, the rest is hand-offs and queues (Note [per-batch cost]).
double working_seconds_per_batch(const PipelineStats& stats) {
  double working = stats.busy_per_batch_seconds(stats.planner);
  for (const StageStats& stage : stats.stages) working += stats.busy_per_batch_seconds(stage);
  return working;
}

}  // namespace

void StageStats::account_idle_time(double wall_seconds) {
  capacity_seconds =
      std::isfinite(wall_seconds) && wall_seconds > 0.0 ? wall_seconds * static_cast<double>(threads) : 0.0;
  waiting_upstream_seconds = std::max(0.0, capacity_seconds - busy_seconds - blocked_downstream_seconds);
}

double StageStats::busy_share() const { return share(busy_seconds, capacity_seconds); }
double StageStats::blocked_downstream_share() const { return share(blocked_downstream_seconds, capacity_seconds); }
double StageStats::waiting_upstream_share() const { return share(waiting_upstream_seconds, capacity_seconds); }

double PipelineStats::consumer_wait_per_batch_seconds() const {
  return batches == 0 ? 0.0 : consumer_wait_seconds / static_cast<double>(batches);
}

double PipelineStats::seconds_per_batch() const {
  return batches == 0 || !std::isfinite(elapsed_seconds) ? 0.0 : elapsed_seconds / static_cast<double>(batches);
}

double PipelineStats::busy_per_batch_seconds(const StageStats& stage) const {
  return batches == 0 ? 0.0 : stage.busy_seconds / static_cast<double>(batches);
}

double PipelineStats::samples_per_second_after_first_batch() const {
  const double since = elapsed_seconds - first_batch_seconds;
  if (batches < 2 || first_batch_samples == 0 || !std::isfinite(since) || since <= 0.0) return 0.0;
  return static_cast<double>(samples - std::min(samples, first_batch_samples)) / since;
}

double PipelineStats::gpu_decoder_share() const {
  if (!gpu_decode.enabled || gpu_decode.states == 0 || !std::isfinite(elapsed_seconds)) return 0.0;
  return share(gpu_decode.state_busy_seconds, elapsed_seconds * static_cast<double>(gpu_decode.states));
}

double PipelineStats::batch_latency_seconds() const { return in_flight.mean * seconds_per_batch(); }

double BatchPathStats::seconds_per_batch(const Leg& leg) const {
  return batches == 0 ? 0.0 : leg.seconds / static_cast<double>(batches);
}

double BatchPathStats::latency_seconds() const {
  double sum = 0.0;
  for (const Leg& leg : legs) sum += seconds_per_batch(leg);
  return sum;
}

const BatchPathStats::Leg* BatchPathStats::longest_wait() const {
  if (batches == 0) return nullptr;
  const Leg* longest = nullptr;
  for (const Leg& leg : legs) {
    if (leg.waiting && (longest == nullptr || leg.seconds > longest->seconds)) longest = &leg;
  }
  return longest;
}

double PipelineStats::consumer_wait_share() const { return share(consumer_wait_seconds, elapsed_seconds); }

double PipelineStats::waited_for_consumer_share() const { return share(ready_queue.full_seconds, elapsed_seconds); }

double UserCodeStats::busy_share(double elapsed_seconds, size_t decode_threads) const noexcept {
  return share(busy_seconds,
               elapsed_seconds * static_cast<double>(std::max<size_t>(1, processes > 0 ? processes : decode_threads)));
}

double PipelineStats::fetch_wait_per_batch_seconds() const {
  return batches > 0 ? remote.wait_seconds / static_cast<double>(batches) : 0.0;
}

double PipelineStats::fetch_wait_share() const {
  const double capacity = elapsed_seconds * static_cast<double>(std::max<size_t>(1, decode_threads));
  return capacity > 0.0 ? std::min(1.0, remote.wait_seconds / capacity) : 0.0;
}

std::string bottleneck_summary(const PipelineStats& stats) {
  const double wall = stats.elapsed_seconds;
  if (!(wall > 0.0) || !std::isfinite(wall)) return "no bottleneck to name: the pipeline has not run";

  // The planner feeds decode, so it leads the chain; a stage's successor is the one that waits for it.
  std::vector<const StageStats*> chain;
  if (!stats.planner.name.empty()) chain.push_back(&stats.planner);
  for (const StageStats& stage : stats.stages) chain.push_back(&stage);
  size_t top = chain.size();
  for (size_t i = 0; i < chain.size(); ++i) {
    if (top == chain.size() || chain[i]->busy_share() > chain[top]->busy_share()) top = i;
  }
  const double top_share = top < chain.size() ? chain[top]->busy_share() : 0.0;

  // With the consumer slow, every token sits in a ready batch it has not taken: the stages idle.
  // (All tokens in use alone says nothing: a slow stage holds them too.) Compared with the busiest
  // stage so that a pipeline both saturated and waited on names whichever holds the run back more.
  // The GPU decoder (Note [GPU JPEG decode]) works beside decode's threads, which do not count the time
  // they sleep on it as busy: it is a stage of its own here.
  const double gpu = stats.gpu_decoder_share();
  const double consumer = stats.waited_for_consumer_share();
  if (gpu >= kSaturated && gpu > top_share && gpu >= consumer) {
    std::string line = "the GPU decoder is the bottleneck: its " + std::to_string(stats.gpu_decode.states) +
                       " decoding states were in use " + percent(gpu) + " of the time";
    if (top < chain.size()) line += ", " + chain[top]->name + " was " + percent(top_share) + " busy";
    return line;
  }
  // User code (Note [Python workers] in io/workers/worker_pool.cpp) works beside decode's threads, which
  // count the time they wait for it as busy: when it is saturated, it is what holds decode back.
  const UserCodeStats* code = nullptr;
  for (const UserCodeStats& one : stats.user_code) {
    if (code == nullptr || one.busy_share(wall, stats.decode_threads) > code->busy_share(wall, stats.decode_threads)) {
      code = &one;
    }
  }
  const double code_share = code != nullptr ? code->busy_share(wall, stats.decode_threads) : 0.0;
  const bool decode_top = top < chain.size() && chain[top]->name == "decode";
  // The network (Note [remote data]): decode's threads count their wait for a shard as busy.
  const double network = stats.fetch_wait_share();
  if (network >= kSaturated && network >= code_share && network >= consumer && (decode_top || network >= top_share)) {
    return "the network is the bottleneck: the " + threads_text(stats.decode_threads) + " of decode waited " +
           percent(network) +
           " of their time for shards to arrive (remote.prefetch fetches further ahead, "
           "remote.connections fetches more at once)";
  }
  if (code_share >= kSaturated && code_share >= consumer && (decode_top || code_share >= top_share)) {
    if (code->processes == 0) {
      return code->what + " is the bottleneck: it kept the " + threads_text(stats.decode_threads) + " of decode " +
             percent(code_share) +
             " busy, taking turns with the GIL (decode.workers: a number runs it in worker "
             "processes, side by side)";
    }
    return code->what + " is the bottleneck: its " + std::to_string(code->processes) + " worker process" +
           (code->processes == 1 ? " was " : "es were ") + percent(code_share) + " busy (decode.workers sets how many)";
  }
  if (consumer >= kSaturated && consumer >= top_share) {
    return "the consumer is the bottleneck: the pipeline waited " + percent(consumer) +
           " of the time for it to take batches";
  }

  if (top < chain.size() && top_share >= kSaturated) {
    const StageStats& stage = *chain[top];
    std::string line =
        stage.name + " is the bottleneck: " + percent(top_share) + " busy (" + threads_text(stage.threads) + ")";
    if (top + 1 < chain.size()) {
      const StageStats& next = *chain[top + 1];
      line += ", " + next.name + " waits " + percent(next.waiting_upstream_share()) + " of the time for it";
    } else {
      line += ", the consumer waits " + percent(stats.consumer_wait_share()) + " of the time for it";
    }
    return line;
  }

  if (top == chain.size() || chain[top]->busy_seconds <= 0.0) {
    return "no bottleneck to name: no stage has worked yet (" + seconds_text(wall) + " since the start)";
  }
  const StageStats& busiest = *chain[top];
  std::string line = "no stage is the bottleneck: the busiest, " + busiest.name + ", was " + percent(top_share) +
                     " busy (" + threads_text(busiest.threads) + ")";
  if (wall < kShortRunSeconds) {
    line += "; a run of " + seconds_text(wall) + " is too short to tell";
  } else if (stats.consumer_wait_share() >= kSaturated && stats.batches > 0) {
    // Nothing is saturated yet the consumer waits: the run is latency-bound (Note [per-batch cost]).
    const double latency = stats.batch_latency_seconds();
    const double working = working_seconds_per_batch(stats);
    line += "; the consumer waited " + percent(stats.consumer_wait_share()) + " of the time: a batch took " +
            micros_text(latency) + " from its plan to the consumer, its stages busy " + micros_text(working) +
            " a batch";
    if (working < latency) line += ", so at least " + micros_text(latency - working) + " went on hand-offs and queues";
    // Measured on each batch (Note [batch path]): the queue that held batches longest.
    const BatchPathStats& path = stats.batch_path;
    if (const BatchPathStats::Leg* wait = path.longest_wait(); wait != nullptr && wait->seconds > 0.0) {
      line += ", the longest queue " + wait->name + ": " + micros_text(path.seconds_per_batch(*wait)) + " a batch";
    }
    // Tokens all in use: more of them in flight would overlap more of that time. Tokens to spare: the
    // planner itself did not keep up, and more tokens would sit unused.
    const bool tokens_short =
        stats.in_flight.capacity > 0 && stats.in_flight.mean >= 0.9 * static_cast<double>(stats.in_flight.capacity);
    line += tokens_short ? " (with all " + std::to_string(stats.in_flight.capacity) +
                               " prefetch tokens in use: a larger prefetch overlaps more batches)"
                         : " (" + fixed_text(stats.in_flight.mean) + " of " + std::to_string(stats.in_flight.capacity) +
                               " prefetch tokens in use on average: a larger prefetch would not help)";
  }
  return line;
}

std::string per_batch_summary(const PipelineStats& stats) {
  if (stats.batches == 0) return "no batch delivered yet";
  std::string line = micros_text(stats.seconds_per_batch()) + " a batch; " +
                     micros_text(stats.batch_latency_seconds()) + " from plan to consumer; busy a batch:";
  std::vector<const StageStats*> chain;
  if (!stats.planner.name.empty()) chain.push_back(&stats.planner);
  for (const StageStats& stage : stats.stages) chain.push_back(&stage);
  for (size_t i = 0; i < chain.size(); ++i) {
    const StageStats& stage = *chain[i];
    line += (i == 0 ? " " : ", ") + stage.name + " " + fixed_text(stats.busy_per_batch_seconds(stage) * 1e6);
    if (stage.threads > 1) line += " (" + threads_text(stage.threads) + ")";
  }
  line += " us (" + micros_text(working_seconds_per_batch(stats)) + " in all); the consumer waited " +
          micros_text(stats.consumer_wait_per_batch_seconds());
  return line;
}

std::string batch_path_summary(const PipelineStats& stats) {
  const BatchPathStats& path = stats.batch_path;
  if (path.batches == 0 || path.legs.empty()) return "no batch delivered yet";
  std::string line = micros_text(path.latency_seconds()) + " from plan to consumer (" + std::to_string(path.batches) +
                     (path.batches == 1 ? " batch):" : " batches):");
  for (size_t i = 0; i < path.legs.size(); ++i) {
    line += (i == 0 ? " " : ", ") + path.legs[i].name + " " + fixed_text(path.seconds_per_batch(path.legs[i]) * 1e6);
  }
  return line + " us";
}

namespace {

void add_stage(StageStats& into, const StageStats& stage, bool shared_threads) {
  if (!shared_threads) into.threads += stage.threads;
  into.items += stage.items;
  into.items_in += stage.items_in;
  into.items_out += stage.items_out;
  into.busy_seconds += stage.busy_seconds;
  into.blocked_downstream_seconds += stage.blocked_downstream_seconds;
}

// The group's batches in flight (or ready): the means add up exactly; the peaks' sum is an upper bound
// (the devices need not peak at once), and every device full at once lasted at most as long as the
// shortest of their full times.
void add_occupancy(OccupancyStats& into, const OccupancyStats& occupancy) {
  into.mean += occupancy.mean;
  into.peak += occupancy.peak;
  into.capacity += occupancy.capacity;
  into.full_seconds = std::min(into.full_seconds, occupancy.full_seconds);
}

// Every device's pipeline times the same legs: the group's are their sums.
void add_batch_path(BatchPathStats& into, const BatchPathStats& path) {
  into.batches += path.batches;
  if (into.legs.empty()) {
    into.legs = path.legs;
    return;
  }
  for (size_t i = 0; i < into.legs.size() && i < path.legs.size(); ++i) into.legs[i].seconds += path.legs[i].seconds;
}

}  // namespace

PipelineStats merged_stats(const std::vector<PipelineStats>& devices) {
  if (devices.empty()) return {};
  PipelineStats all = devices.front();
  if (devices.size() == 1) return all;
  for (size_t d = 1; d < devices.size(); ++d) {
    const PipelineStats& one = devices[d];
    all.device += ", " + one.device;
    all.elapsed_seconds = std::max(all.elapsed_seconds, one.elapsed_seconds);
    all.batches += one.batches;
    all.samples += one.samples;
    all.bytes += one.bytes;
    all.first_batch_seconds = std::max(all.first_batch_seconds, one.first_batch_seconds);
    all.first_batch_samples += one.first_batch_samples;
    add_stage(all.planner, one.planner, false);
    for (size_t i = 0; i < all.stages.size() && i < one.stages.size(); ++i) {
      add_stage(all.stages[i], one.stages[i], /*shared_threads=*/i == 0);  // stages[0] is decode: one pool
    }
    add_batch_path(all.batch_path, one.batch_path);
    all.consumer_wait_seconds += one.consumer_wait_seconds;
    all.consumer_waits += one.consumer_waits;
    all.placed_bytes += one.placed_bytes;
    add_occupancy(all.in_flight, one.in_flight);
    add_occupancy(all.ready_queue, one.ready_queue);
    all.ready_queue_peak = all.ready_queue.peak;
    PinnedPoolStats& pool = all.pool;
    pool.slab_count += one.pool.slab_count;
    pool.pinned = pool.pinned && one.pool.pinned;
    pool.leases += one.pool.leases;
    pool.waits += one.pool.waits;
    pool.wait_seconds += one.pool.wait_seconds;
    pool.host_alloc_calls += one.pool.host_alloc_calls;
    pool.allocations_after_start += one.pool.allocations_after_start;
    pool.leased_bytes += one.pool.leased_bytes;
    pool.peak_bytes += one.pool.peak_bytes;
    pool.pending += one.pool.pending;
    // One cache folder's counts, whichever device's pipeline reports them: the same numbers, not summed.
    if (one.remote.used && (!all.remote.used || one.remote.wait_seconds > all.remote.wait_seconds)) {
      all.remote = one.remote;
    }
    DatasetCacheStats& cache = all.cache;
    cache.capacity_bytes += one.cache.capacity_bytes;
    cache.used_bytes += one.cache.used_bytes;
    cache.samples += one.cache.samples;
    cache.hits += one.cache.hits;
    cache.misses += one.cache.misses;
    cache.not_kept += one.cache.not_kept;
    cache.hit_epochs = std::min(cache.hit_epochs, one.cache.hit_epochs);
    cache.gathers += one.cache.gathers;
    cache.timed_gathers += one.cache.timed_gathers;
    cache.gather_seconds += one.cache.gather_seconds;
    cache.moves += one.cache.moves;
    PipelineStats::GpuDecodeStats& gpu = all.gpu_decode;
    gpu.enabled = gpu.enabled || one.gpu_decode.enabled;
    gpu.gpu_images += one.gpu_decode.gpu_images;
    gpu.cpu_images += one.gpu_decode.cpu_images;
    gpu.gpu_group_seconds += one.gpu_decode.gpu_group_seconds;
    gpu.ready_seconds = std::max(gpu.ready_seconds, one.gpu_decode.ready_seconds);
    gpu.busy_seconds = std::max(gpu.busy_seconds, one.gpu_decode.busy_seconds);  // wall time: the busiest decoder's
    gpu.states += one.gpu_decode.states;
    gpu.state_busy_seconds += one.gpu_decode.state_busy_seconds;
    if (gpu.unavailable.empty()) gpu.unavailable = one.gpu_decode.unavailable;
    // Each device chooses for itself (the first device's is `all`'s already): one word if they agree, else
    // "mixed"; the rates add up.
    if (gpu.auto_choice != one.gpu_decode.auto_choice) gpu.auto_choice = "mixed";
    gpu.auto_cpu_images_per_second += one.gpu_decode.auto_cpu_images_per_second;
    gpu.auto_gpu_images_per_second += one.gpu_decode.auto_gpu_images_per_second;
    for (size_t k = 0; k < all.source_parts.size() && k < one.source_parts.size(); ++k) {
      all.source_parts[k].samples += one.source_parts[k].samples;
    }
    // user_code: the devices' pipelines share the source and transforms, and so their workers; the first
    // device's, `all`'s already, says it all.
    all.skipped_samples += one.skipped_samples;
    for (const SkippedSample& skipped : one.skipped) {
      if (all.skipped.size() < PipelineStats::kMaxListedSkips) all.skipped.push_back(skipped);
    }
  }
  // Capacity is wall time x threads: recomputed for the merged threads and the longest device's run.
  all.planner.account_idle_time(all.elapsed_seconds);
  for (StageStats& stage : all.stages) stage.account_idle_time(all.elapsed_seconds);
  return all;
}

}  // namespace ferry
