#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ferry::detail {

/// Note [trace]
/// ~~~~~~~~~~~~
/// With `stats.trace` (EngineOptions::trace) a pipeline writes its run as a Chrome trace-event file
/// (JSON, opened by Perfetto and chrome://tracing): a span for each stage's work on each batch (a
/// decode span per group of samples) on the thread that did it, the consumer's waits in next(),
/// counters for the batches holding a prefetch token, the batches ready for the consumer and the
/// pinned slabs in use, and an instant event for each skipped sample. The times are the clock reads
/// that time the stages for the stats anyway (Note [stats] in run_counters.h), so the trace and the
/// report tell the same story; a counter's time is the one its change was counted at, under its lock,
/// so that the values follow one another in time as they did in the count.
///
/// Pipelines of one process that name the same file while it is open (a PipelineGroup's devices, or a
/// training and an evaluation pipeline) share it: each is a track of its own (a trace "process"), all on
/// one clock. A pipeline that names it after it was closed replaces it, once the last writer is done.
///
/// Recording must not slow the run: each thread appends to blocks of its own with a few stores an event
/// (a lock only to take its next block, once in 1024 events, and for a skipped sample), and a writer
/// thread, 20 times a second, turns what the threads have published into JSON and appends it to the file,
/// flushed each time, so memory stays bounded however long the run. The file is the trace-event format's
/// array form, whose closing bracket is optional: a run killed part-way leaves a trace the viewers open,
/// its tracks named. The file is closed when every track's run has ended; a track's events after its end
/// (its shutdown) are dropped. Without `stats.trace` nothing is recorded: the graph holds no Trace and
/// pays one null check per event.
class Trace {
 public:
  using Clock = std::chrono::steady_clock;

  /// What an event's `what` names.
  enum class Counter : uint8_t { kTokens, kReady, kSlabs };

  /// A trace and the track a pipeline writes in it.
  struct Opened {
    std::shared_ptr<Trace> trace;
    uint32_t track = 0;
  };
  /// Joins the trace this process is writing to `path` (the same file however it is spelled), or makes a
  /// new one (the file created or emptied), and adds a track named `name` ("ferry cuda:0") whose times
  /// count from `start` and whose span names, by index, are `spans`. Throws ferry::Error naming the path
  /// when it cannot be written.
  static Opened open(const std::string& path, std::string name, Clock::time_point start,
                     std::vector<std::string> spans);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  /// The track's run ended at `at_ns` (its clock): its later events are dropped; once every track's run
  /// has ended, the file is finished and closed.
  void end_track(uint32_t track, uint64_t at_ns) noexcept;

  /// Span `span` of `track` from `start_ns` to `end_ns` (the track's clock) on this thread, for batch
  /// `batch` of `epoch` (or a plan) and `samples` samples (0: not shown). `role` names the thread in the
  /// viewer the first time it records ("worker", "consumer").
  void span(uint32_t track, uint8_t span, uint64_t start_ns, uint64_t end_ns, uint64_t epoch, uint64_t batch,
            uint64_t samples, const char* role);
  /// Counter `counter` of `track` stands at `value` from `at_ns`.
  void count(uint32_t track, Counter counter, uint64_t at_ns, uint64_t value, const char* role);
  /// Sample `index` (its key) was skipped at `at_ns` in `stage` because of `reason`.
  void skipped(uint32_t track, uint64_t at_ns, uint64_t index, std::string_view key, std::string_view stage,
               std::string_view reason, const char* role);

  const std::string& path() const noexcept { return path_; }

 private:
  // Plain data, so that appending one is a few stores.
  struct Event {
    enum class Kind : uint8_t { kSpan, kCount, kSkipped };
    Kind kind = Kind::kSpan;
    uint8_t what = 0;  // the span's index in its track's names, or the Counter
    uint32_t track = 0;
    uint64_t start_ns = 0;  // the track's clock
    uint64_t end_ns = 0;
    uint64_t a = 0;  // span: epoch; count: value; skipped: the sample's index
    uint64_t b = 0;  // span: batch
    uint64_t c = 0;  // span: samples
  };
  // A thread's events in blocks it appends to without a lock, read by the writer as they are published.
  // The thread fills a block, publishing each event by storing the block's new size (release); the
  // writer reads up to the size it loads (acquire). A block the writer has read to the end, once the
  // thread has moved on to the next, goes back to the log's spares: after the first few, recording
  // never allocates.
  struct Block {
    static constexpr uint32_t kEvents = 1024;
    std::atomic<uint32_t> size{0};
    std::atomic<Block*> next{nullptr};
    Event events[kEvents];
  };
  struct ThreadLog {
    ThreadLog();
    ~ThreadLog();
    ThreadLog(const ThreadLog&) = delete;
    ThreadLog& operator=(const ThreadLog&) = delete;
    /// A block for the thread to go on in (a spare one, else a new one); nullptr when out of memory.
    Block* spare_block() noexcept;

    Block* tail;        // the thread's: the block it appends to
    Block* head;        // the writer's: where it reads on (the thread's block, or a full one it read before
                        // the thread went on to the next)
    uint32_t read = 0;  // the writer's: the events of head it has written
    std::mutex mutex;   // guards what follows: taken by the thread only for a block or a skipped sample
    std::vector<Block*> spares;
    std::vector<std::pair<Event, std::string>> skipped;        // with its key, stage and reason as JSON members
    std::vector<std::pair<Event, std::string>> taken_skipped;  // the writer's: written and cleared
    int tid = 0;
    std::string role;
    std::vector<bool> named_in;                          // writer only: the tracks whose thread_name was written
    std::unordered_map<uint64_t, std::string> prefixes;  // writer only: prefix() by track, kind and name
  };
  struct Track {
    std::string name;
    int64_t offset_ns = 0;  // the track's clock minus the trace's
    std::vector<std::string> spans;
    std::optional<uint64_t> ended_ns;  // its run's end, its clock
  };
  struct FileCloser {
    void operator()(std::FILE* file) const noexcept { (void)std::fclose(file); }
  };

  Trace(std::string path, std::string key, std::unique_ptr<std::FILE, FileCloser> file);
  /// Adds a track unless the trace is closing (every track ended). Takes mutex_.
  std::optional<uint32_t> try_add_track(std::string name, Clock::time_point start, std::vector<std::string> spans);
  ThreadLog& log(const char* role);
  void record(const Event& event, const char* role);
  /// Writes `event` of `log` (`text`: a skipped sample's members) to `out`, unless its track has ended by then.
  void append_event(std::string& out, ThreadLog& log, const Event& event, const std::vector<Track>& tracks,
                    const std::string* text);
  void write_loop();
  /// Takes every thread's events and writes them, with the names of tracks new since the last call.
  /// Writer thread (or finish(), after it stopped).
  void drain();
  /// An event's text up to its time, the same for each event of its kind, name, track and thread.
  static const std::string& prefix(ThreadLog& log, const Event& event, const Track& track);
  void write(std::string_view text);
  /// Stops the writer, writes what is left and the closing bracket, closes the file and leaves the
  /// registry of open traces. Once; a second caller returns when the first is done.
  void finish() noexcept;

  const std::string path_;
  const std::string key_;  // the registry's name for the file
  const Clock::time_point origin_;
  const uint64_t serial_;  // tells this trace from an earlier one at the same address
  // The writer thread's, or finish()'s after it stopped:
  std::unique_ptr<std::FILE, FileCloser> file_;
  bool first_event_ = true;
  std::string out_;                    // drain()'s text, kept between calls
  std::vector<bool> named_tracks_;     // the tracks whose names were written
  std::atomic<bool> finished_{false};  // record nothing more
  std::atomic<bool> dropping_{false};  // a write failed or memory ran out: record nothing more
  std::once_flag finish_once_;

  std::mutex mutex_;  // guards what follows
  std::vector<std::unique_ptr<ThreadLog>> logs_;
  std::vector<Track> tracks_;
  bool closing_ = false;  // every track ended: no track may join
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread writer_;
};

}  // namespace ferry::detail
