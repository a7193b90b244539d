#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

/// What a pipeline's pinned pool (PinnedPool) did, for the report and stats().
struct PinnedPoolStats {
  size_t slab_bytes = 0;
  size_t slab_count = 0;
  bool pinned = false;            // page-locked (cudaHostAlloc) or the pageable fallback
  uint64_t leases = 0;            // successful acquisitions
  uint64_t waits = 0;             // acquisitions that found no free slab and had to wait
  double wait_seconds = 0.0;      // time acquire() spent waiting for a slab, summed over callers
  uint64_t host_alloc_calls = 0;  // cudaHostAlloc calls: all of them at construction
  /// Staging-memory allocations (pinned or pageable) after construction: by design 0. A number
  /// above 0 means memory is pinned on the hot path, which costs far more than the copy itself.
  uint64_t allocations_after_start = 0;
  size_t leased_bytes = 0;  // bytes leased now
  size_t peak_bytes = 0;    // most bytes leased at once
  size_t pending = 0;       // slabs returned whose copy event has not been seen complete yet
};

/// What a dataset cache holds and did, for the report and stats().
struct DatasetCacheStats {
  bool enabled = false;
  std::string memory;    // "managed", "device" or "host"
  std::string location;  // where its bytes are now: "cuda:0", or "host"
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t samples = 0;     // samples kept
  uint64_t hits = 0;        // samples delivered from the cache
  uint64_t misses = 0;      // samples delivered from a read and decode
  uint64_t not_kept = 0;    // deliveries of samples that did not fit in the arena (once per epoch each)
  uint64_t hit_epochs = 0;  // epochs whose every delivered sample came from the cache
  uint64_t gathers = 0;     // batches with a gather
  uint64_t timed_gathers = 0;
  double gather_seconds = 0.0;  // summed over timed_gathers (device time on a GPU)
  double last_move_seconds = 0.0;
  uint64_t moves = 0;

  /// Gather time per timed batch (0 before the first). Pure.
  double gather_seconds_per_batch() const noexcept {
    return timed_gathers == 0 ? 0.0 : gather_seconds / static_cast<double>(timed_gathers);
  }
};

/// User code that runs beside the pipeline's threads (a python source or transform, Note [Python workers]
/// in io/workers/worker_pool.cpp), for the report and stats().
struct UserCodeStats {
  std::string what;       // "python dataset 'pkg.mod:make'"
  size_t processes = 0;   // its worker processes; 0: it runs on the decode threads (decode.workers: threads)
  uint64_t calls = 0;     // samples it made or transformed (those that raised too)
  uint64_t requests = 0;  // messages that took them to the workers: a group of samples each
  /// Time its workers spent on calls (the code and writing what it returned), summed over them; on the
  /// decode threads, the time they spent in the code (taking turns with the GIL).
  double busy_seconds = 0.0;
  /// Workers that died, overran decode.timeout or were stopped mid-call; each is replaced when work next
  /// needs one.
  uint64_t replaced = 0;

  /// busy_seconds over its capacity in `elapsed_seconds`: its processes', or the decode threads'. Pure.
  double busy_share(double elapsed_seconds, size_t decode_threads) const noexcept;
};

/// One of the sources a mixed source draws from (source: {mix: [...]}), and how many of the run's samples
/// came from it.
struct SourcePartStats {
  std::string what;      // the part's Source::describe()
  double weight = 0.0;   // its weight over the weights' sum: the share it should have
  uint64_t samples = 0;  // samples decoded from it (from the dataset cache too); skipped ones not
};

/// What the run fetched: shards over HTTP(S), S3 or from commands, and compressed ones decoded, all
/// through the local cache (Note [remote data] in io/remote/data_store.cpp). The counts are the cache
/// folder's in this process, whichever pipeline asked.
struct RemoteDataStats {
  bool used = false;  // something was fetched or decoded, or came from the cache
  std::string cache_dir;
  uint64_t max_bytes = 0;         // the cache's budget
  uint64_t fetches = 0;           // shards (or blocks) fetched or decoded into the cache
  uint64_t fetched_bytes = 0;     // their bytes in the cache (decoded)
  uint64_t network_bytes = 0;     // bytes received over the network (retried ones too)
  uint64_t from_cache_bytes = 0;  // bytes the source read from the cache (every remote byte it uses)
  uint64_t requests = 0;          // HTTP requests sent, retries included
  uint64_t retries = 0;           // requests that repeated a failed one
  uint64_t evictions = 0;         // shards dropped from the cache to make room
  double wait_seconds = 0.0;      // the decode threads' time waiting for a shard to arrive, summed
};

/// Where one stage's time went. Each stage has `threads` threads for the whole run, so its
/// capacity is wall time x threads, and every second of capacity is one of three kinds:
///
///   busy                working on an item (the stage's own code);
///   blocked downstream  holding finished work or needing a resource that a later part of the
///                       pipeline has not given back (pack waiting for a pinned slab, event-wait
///                       pushing into a full ready queue, the planner holding a plan while every
///                       `prefetch` token is in use);
///   waiting upstream    the rest: nothing to do, because no input had arrived.
///
/// busy and blocked are measured; waiting upstream is what is left (never below zero). A share is
/// the part of capacity_seconds, so stages with different thread counts compare directly.
struct StageStats {
  std::string name;
  size_t threads = 1;
  /// Runs of the stage's body (batches for collate; kept for callers older than items_in/out).
  uint64_t items = 0;
  uint64_t items_in = 0;   // items the stage started work on, counted in in_unit
  uint64_t items_out = 0;  // items it finished without error and handed on, counted in out_unit
  std::string in_unit;     // "samples" or "batches"
  std::string out_unit;
  double busy_seconds = 0.0;                // summed over threads: decode can exceed wall time
  double blocked_downstream_seconds = 0.0;  // summed over threads
  double waiting_upstream_seconds = 0.0;    // capacity - busy - blocked, at least 0
  double capacity_seconds = 0.0;            // wall time x threads

  /// Sets capacity_seconds from the wall time and waiting_upstream_seconds from what busy and
  /// blocked leave of it. Pure; call after setting threads, busy and blocked.
  void account_idle_time(double wall_seconds);
  /// Parts of capacity_seconds in [0, 1] (0 when the capacity is 0). Pure.
  double busy_share() const;
  double blocked_downstream_share() const;
  double waiting_upstream_share() const;
};

/// A time-weighted count of batches in one part of the pipeline.
struct OccupancyStats {
  double mean = 0.0;          // batches on average over the run (time-weighted)
  size_t peak = 0;            // most batches at once
  size_t capacity = 0;        // the bound the count can never exceed (prefetch)
  double full_seconds = 0.0;  // time the count stood at its capacity
};

/// A sample the pipeline left out of its batch instead of failing the run (`on_error: skip`).
struct SkippedSample {
  uint64_t index = 0;  // in the source
  std::string key;     // the source's name for it (a file, a record key); may be empty
  std::string stage;   // where it failed
  std::string reason;  // the error's message
};

/// Note [batch path]
/// ~~~~~~~~~~~~~~~~~~
/// Where the delivered batches spent their time between their plan and the consumer's hands, measured
/// on every batch: the points where a batch leaves one thread's work and waits for the next thread are
/// stamped on it (with the clock reads that time the stages anyway, plus one in collate), and the
/// consumer adds up the legs between them when it takes the batch. Working legs and queues alternate:
///
///   plan to collated   the split, decode (with the samples' waits for a decode thread), putting the
///                      samples back in order, collate: a batch is first whole when collate hands it on
///   to pack            queued for the pack thread          pack         packing (and any wait for a slab)
///   to h2d             queued for the h2d thread           h2d          submitting the copy
///   to event-wait      queued for the completion thread    event-wait   the copy finishing, the hand-over
///   to consumer        ready, until next() takes it
///
/// Their sum is each batch's measured latency; batch_latency_seconds is the same from Little's law. A
/// batch cut from several plans (Note [refilling batches] in batch_cutter.cpp) counts from its first
/// sample's plan. Markers and batches that never reached the consumer are not counted.
struct BatchPathStats {
  struct Leg {
    std::string name;      // "plan to collated", "to pack", "pack", ...
    bool waiting = false;  // a queue between two threads rather than a stage's work
    double seconds = 0.0;  // summed over `batches`
  };
  uint64_t batches = 0;   // batches timed: those handed to the consumer
  std::vector<Leg> legs;  // in the batch's order (a pipeline's stats list all eight from the start)

  /// A leg's mean time per batch (0 before the first batch). Pure.
  double seconds_per_batch(const Leg& leg) const;
  /// The legs' sum per batch: the mean measured latency from plan to consumer. Pure.
  double latency_seconds() const;
  /// The waiting leg with the most time; null when no batch was timed. Pure.
  const Leg* longest_wait() const;
};

/// A snapshot of a running (or finished) pipeline. Cheap to take (a few atomic loads and three
/// short locks, no allocation beyond the strings and vectors it returns); safe from any thread.
///
/// Times run from the pipeline's start to the end of the run — the consumer met the end or an
/// error, or close() was called — or to now while it runs, so rates stay true when a snapshot is
/// taken long after the end.
struct PipelineStats {
  /// How many skipped samples `skipped` lists at most; skipped_samples counts all of them.
  static constexpr size_t kMaxListedSkips = 100;

  std::string device;
  size_t decode_threads = 0;
  /// decode.threads auto under torchrun: the processes on this machine that shared its cores (1 otherwise).
  size_t decode_threads_shared_by = 1;
  size_t prefetch = 0;
  double elapsed_seconds = 0.0;  // wall time of the run
  uint64_t batches = 0;          // handed to the consumer
  uint64_t samples = 0;
  uint64_t bytes = 0;  // field bytes handed to the consumer
  /// When the first batch was handed to the consumer (seconds from the start; 0 before it), and its
  /// samples: the start-up cost (opening files, a GPU decoder's set-up) apart from the steady rate.
  double first_batch_seconds = 0.0;
  uint64_t first_batch_samples = 0;

  /// The planner: in = samples planned, out = batches planned; blocked downstream = time all
  /// `prefetch` tokens were held by batches the consumer had not taken while the planner had more
  /// to plan, i.e. the pipeline waited for the consumer.
  StageStats planner{.name = "plan", .in_unit = "samples", .out_unit = "batches"};
  std::vector<StageStats> stages;  // decode, collate, pack, h2d, event-wait: in pipeline order

  /// Each delivered batch's way from its plan to the consumer, leg by leg (Note [batch path]).
  BatchPathStats batch_path;

  double consumer_wait_seconds = 0.0;  // time next() spent blocked waiting for a batch
  uint64_t consumer_waits = 0;         // next() calls that found no batch ready (and waited)

  /// Batches holding a token: planned, not yet taken by the consumer (<= prefetch).
  OccupancyStats in_flight;
  /// Batches ready and waiting for the consumer (what next() finds).
  OccupancyStats ready_queue;
  size_t ready_queue_peak = 0;  // = ready_queue.peak (kept for older callers)

  PinnedPoolStats pool;
  /// Field bytes the decode threads copied straight into slabs as they decoded the samples (Note [placing
  /// samples] in pipeline/sample_placer.h); pack copied the rest.
  uint64_t placed_bytes = 0;
  /// The dataset cache (Note [dataset cache]); enabled false without one.
  DatasetCacheStats cache;
  /// JPEG fields decoded on the GPU (Note [GPU JPEG decode] in io/decoders/nvjpeg_decoder.h): how many images
  /// each path decoded, when the GPU decoder was ready and how busy it was, and the time the GPU groups'
  /// tasks took (summed over threads: reads, the GPU's decode, CPU fallbacks). enabled false when no field
  /// is decoded on the GPU.
  struct GpuDecodeStats {
    bool enabled = false;
    uint64_t gpu_images = 0;
    uint64_t cpu_images = 0;  // of the same fields: routed to the CPU, or not decodable by the hardware
    double gpu_group_seconds = 0.0;
    /// Seconds from the GPU decoder's start (as the pipeline is made) until it could take images (under
    /// `auto` it starts in the background while the CPU decodes); 0 while it cannot.
    double ready_seconds = 0.0;
    /// Seconds during which the GPU decoder had images in its hardware (wall time, not summed).
    double busy_seconds = 0.0;
    /// Its decoding states (calls it runs at once), and the seconds each was in use, summed: over states x
    /// elapsed_seconds, the share of its capacity used (gpu_decoder_share()).
    size_t states = 0;
    double state_busy_seconds = 0.0;
    /// Why the GPU decoded nothing under `auto` (its background start failed); "" otherwise.
    std::string unavailable;
    /// Under `auto` (Note [auto: the faster decoder] in pipeline/auto_decode_choice.h): "warming" (the GPU
    /// decoder is not ready), "trying" (the GPU decodes while its rate is measured), "gpu" or "cpu" (the
    /// path chosen); "" under `gpu`. The rates it compared, images a second (0 where not measured).
    std::string auto_choice;
    double auto_cpu_images_per_second = 0.0;
    double auto_gpu_images_per_second = 0.0;
  } gpu_decode;

  /// User code the decode stage runs: the source's, then each transform's (empty without any).
  std::vector<UserCodeStats> user_code;
  /// A mixed source's parts, in the config's order (empty for any other source).
  std::vector<SourcePartStats> source_parts;
  /// What was fetched (remote.used: only where the source fetches anything).
  RemoteDataStats remote;

  uint64_t skipped_samples = 0;        // all samples skipped so far
  std::vector<SkippedSample> skipped;  // the first kMaxListedSkips of them

  /// The consumer's wait per batch taken (0 before the first batch). Pure.
  double consumer_wait_per_batch_seconds() const;
  /// Note [per-batch cost]: wall time per batch delivered (1 / the batch rate; 0 before the first). Pure.
  double seconds_per_batch() const;
  /// The share of the GPU decoder's capacity used: its decoding states' busy time over states x the run's
  /// time (0 without GPU decoding). Pure.
  double gpu_decoder_share() const;
  /// Samples per second after the first batch: the samples since it over the time since it (0 before a
  /// second batch). The steady rate, without the start-up that first_batch_seconds measures. Pure.
  double samples_per_second_after_first_batch() const;
  /// A stage's busy time (summed over its threads) per batch delivered (0 before the first). Pure.
  double busy_per_batch_seconds(const StageStats& stage) const;
  /// How long a batch took on average from its plan to the consumer's hands, by Little's law: batches
  /// in flight on average times the time per batch (0 before the first batch). Pure.
  double batch_latency_seconds() const;
  /// The decode threads' wait for fetched shards per batch delivered (0 before the first). Pure.
  double fetch_wait_per_batch_seconds() const;
  /// The share of the decode threads' capacity spent waiting for fetched shards, in [0, 1]. Pure.
  double fetch_wait_share() const;
  /// Part of the wall time the consumer spent waiting in next(), in [0, 1]. Pure.
  double consumer_wait_share() const;
  /// Part of the wall time the whole pipeline stood waiting for the consumer: every token held by
  /// a ready batch it had not taken (the ready queue full). Pure. (The planner's blocked time is
  /// not this: tokens are also all in use when they are all held by batches still being made.)
  double waited_for_consumer_share() const;
};

/// One line naming what limits the run, from the stats alone. Pure; thread-safe. Examples:
///   "decode is the bottleneck: 97% busy (4 threads), collate waits 60% of the time for it"
///   "python dataset 'pkg.data:make' is the bottleneck: its 4 worker processes were 96% busy (decode.workers
///    sets how many)"
///   "the consumer is the bottleneck: the pipeline waited 80% of the time for it to take batches"
///   "no stage is the bottleneck: the busiest, decode, was 12% busy (4 threads); ..."
/// A PipelineGroup's run as one (Note [one process, several devices] in pipeline_group.h): each device's
/// counts, bytes and stage times summed, the run's wall time and first batch the longest device's,
/// the decode stage's threads the shared pool's (every device's pipeline reports the whole pool), the
/// serial stages' threads one per device; queue occupancy with the means summed, the peaks summed (an
/// upper bound) and the time all were full the shortest device's; the GPU decoders' busy time the
/// busiest one's, their states and state time summed; `device` lists the devices ("cuda:0, cuda:1").
/// One device's stats come back as they are.
PipelineStats merged_stats(const std::vector<PipelineStats>& devices);

std::string bottleneck_summary(const PipelineStats& stats);

/// Note [per-batch cost]
/// ~~~~~~~~~~~~~~~~~~~~~
/// Where a batch's time goes, from the stats alone: the wall time per batch, how long one batch took
/// from its plan to the consumer (batch_latency_seconds), and each stage's busy time per batch. The
/// stages' busy times added up (decode's over all its threads, so an upper bound) are at most the part
/// of the latency spent working; the rest went on handing the batch between threads and on waiting in
/// queues. When that rest dominates, the run is latency-bound: no stage is busy, yet the
/// consumer waits, and only more batches in flight or cheaper hand-offs help. One line, e.g.
///   "25.0 us a batch; 250.0 us from plan to consumer; busy a batch: plan 0.5, decode 17.2 (16 threads),
///    collate 2.3, pack 17.0, h2d 14.2, event-wait 9.8 us (61.0 us in all); the consumer waited 13.4 us"
/// Pure; thread-safe.
std::string per_batch_summary(const PipelineStats& stats);

/// Note [batch path] in one line: the measured latency and each leg's time a batch, e.g.
///   "597.0 us from plan to consumer (40000 batches): plan to collated 107.0, to pack 388.0, pack 8.0,
///    to h2d 37.0, h2d 11.0, to event-wait 24.0, event-wait 7.0, to consumer 15.0 us"
/// Pure; thread-safe.
std::string batch_path_summary(const PipelineStats& stats);

}  // namespace ferry
