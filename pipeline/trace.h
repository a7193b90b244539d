#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
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
/// report tell the same story.
///
/// Pipelines that name the same file in one process (a PipelineGroup's devices, or a training and an
/// evaluation pipeline) share it: each is a track of its own (a trace "process"), all on one clock.
///
/// Recording must not slow the run: each thread appends to a buffer of its own (a lock nobody else
/// takes but the writer, a few times a second), and a writer thread turns the buffers into JSON and
/// appends them to the file as the run goes, so memory stays bounded however long the run. The file is
/// the trace-event format's array form, whose closing bracket is optional: a run killed mid-way still
/// leaves a trace the viewers open. It is closed when every track's run has ended; events after that
/// (the shutdown's) are dropped. Without `stats.trace` nothing is recorded: the graph holds no Trace and
/// pays one null check per event.
class Trace {
 public:
  using Clock = std::chrono::steady_clock;

  /// What an event's `what` names.
  enum class Counter : uint8_t { kTokens, kReady, kSlabs };

  /// The Trace writing `path` in this process, or a new one (the file created or emptied). Throws
  /// ferry::Error naming the path when it cannot be opened.
  static std::shared_ptr<Trace> open(const std::string& path);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  /// A new track, named `name` ("ferry cuda:0"), whose times count from `start`; its span names, by
  /// index, are `spans`. Returns its id.
  uint32_t add_track(std::string name, Clock::time_point start, std::vector<std::string> spans);
  /// The track's run ended: once every track's has, the file is finished and closed.
  void end_track(uint32_t track);

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
    uint64_t b = 0;  // span: batch; skipped: its text's place in the log's texts
    uint64_t c = 0;  // span: samples
  };
  // One thread's events since the writer last took them. Two buffers that keep their capacity, swapped
  // by the writer: after the first few swaps recording never allocates.
  struct ThreadLog {
    std::mutex mutex;
    std::vector<Event> events;       // guarded by mutex: the thread appends here
    std::vector<std::string> texts;  // guarded by mutex: skipped samples' key, stage and reason (JSON members)
    std::vector<Event> taken;        // the writer's: the events it took last, written and cleared
    std::vector<std::string> taken_texts;
    int tid = 0;
    std::string role;
    std::vector<bool> named_in;                          // writer only: the tracks whose thread_name was written
    std::unordered_map<uint64_t, std::string> prefixes;  // writer only: prefix() by track, kind and name
  };
  struct Track {
    std::string name;
    int64_t offset_ns = 0;  // the track's clock minus the trace's
    std::vector<std::string> spans;
    bool ended = false;
  };

  Trace(std::string path, std::FILE* file);
  ThreadLog& log(const char* role);
  void record(const Event& event, const char* role, std::string* text = nullptr);
  void write_loop();
  /// Takes every thread's events and writes them. Writer thread (or finish(), after it stopped).
  void drain();
  /// An event's text up to its time, the same for each event of its kind, name, track and thread. Writer only.
  static const std::string& prefix(ThreadLog& log, const Event& event, const Track& track);
  void write(std::string_view text);
  void finish();

  const std::string path_;
  const Clock::time_point origin_;
  const uint64_t serial_;  // tells this trace from an earlier one at the same address
  std::FILE* file_;        // writer thread, or finish() after it stopped
  bool first_event_ = true;
  std::string out_;  // drain()'s text, kept between calls
  bool write_failed_ = false;
  std::atomic<bool> finished_{false};

  std::mutex mutex_;  // guards what follows
  std::vector<std::unique_ptr<ThreadLog>> logs_;
  std::vector<Track> tracks_;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread writer_;
};

}  // namespace ferry::detail
