#include "ferry/pipeline/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <map>

#include "ferry/pipeline/error.h"

namespace ferry::detail {
namespace {

// How often the writer moves the threads' events to the file: often enough that a few hundred
// thousand events a second never pile up, seldom enough that its locks go unnoticed.
constexpr std::chrono::milliseconds kWriteInterval{200};

// The counters' names in the viewer, by Trace::Counter, and the unit each counts.
constexpr const char* kCounterNames[] = {"batches holding a prefetch token", "batches ready for the consumer",
                                         "pinned slabs in use"};
constexpr const char* kCounterUnits[] = {"batches", "batches", "slabs"};

std::atomic<uint64_t> g_next_serial{1};

// The traces open in this process, by path: pipelines naming one file share it.
std::mutex g_open_mutex;
std::map<std::string, std::weak_ptr<Trace>>& open_traces() {
  static auto* traces = new std::map<std::string, std::weak_ptr<Trace>>();  // never destroyed: used at exit
  return *traces;
}

// The thread's log in the trace it last recorded to.
struct CachedLog {
  uint64_t serial = 0;
  void* log = nullptr;
};
thread_local CachedLog t_cached;

void append_escaped(std::string& out, std::string_view text) {
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
}

// Nanoseconds as the format's microseconds, to the nanosecond.
void append_us(std::string& out, uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%" PRIu64 ".%03" PRIu64, ns / 1000, ns % 1000);
  out += text;
}

void append_metadata(std::string& out, const char* what, uint32_t pid, const int* tid, std::string_view name) {
  out += "{\"ph\":\"M\",\"name\":\"";
  out += what;
  out += "\",\"pid\":" + std::to_string(pid);
  if (tid != nullptr) out += ",\"tid\":" + std::to_string(*tid);
  out += ",\"args\":{\"name\":\"";
  append_escaped(out, name);
  out += "\"}}";
}

}  // namespace

std::shared_ptr<Trace> Trace::open(const std::string& path) {
  std::lock_guard lock(g_open_mutex);
  auto& traces = open_traces();
  if (auto it = traces.find(path); it != traces.end()) {
    if (auto open = it->second.lock(); open && !open->finished_.load(std::memory_order_acquire)) return open;
  }
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) throw Error("stats.trace: cannot write '" + path + "': " + std::strerror(errno));
  std::shared_ptr<Trace> trace(new Trace(path, file));
  traces[path] = trace;
  return trace;
}

Trace::Trace(std::string path, std::FILE* file)
    : path_(std::move(path)),
      origin_(Clock::now()),
      serial_(g_next_serial.fetch_add(1, std::memory_order_relaxed)),
      file_(file) {
  write("[\n");
  writer_ = std::thread([this] { write_loop(); });
}

Trace::~Trace() { finish(); }

uint32_t Trace::add_track(std::string name, Clock::time_point start, std::vector<std::string> spans) {
  std::lock_guard lock(mutex_);
  const auto offset = std::chrono::duration_cast<std::chrono::nanoseconds>(start - origin_).count();
  tracks_.push_back(Track{std::move(name), static_cast<int64_t>(offset), std::move(spans)});
  return static_cast<uint32_t>(tracks_.size() - 1);
}

void Trace::end_track(uint32_t track) {
  bool all_ended = true;
  {
    std::lock_guard lock(mutex_);
    if (track < tracks_.size()) tracks_[track].ended = true;
    for (const Track& t : tracks_) all_ended = all_ended && t.ended;
  }
  if (all_ended) finish();
}

Trace::ThreadLog& Trace::log(const char* role) {
  if (t_cached.serial == serial_) return *static_cast<ThreadLog*>(t_cached.log);
  const int tid = static_cast<int>(::syscall(SYS_gettid));
  std::lock_guard lock(mutex_);
  ThreadLog* found = nullptr;
  for (const auto& log : logs_) {
    if (log->tid == tid) found = log.get();
  }
  if (found == nullptr) {
    logs_.push_back(std::make_unique<ThreadLog>());
    found = logs_.back().get();
    found->tid = tid;
    found->role = role;
  }
  t_cached = CachedLog{serial_, found};
  return *found;
}

void Trace::record(Event&& event, const char* role) {
  if (finished_.load(std::memory_order_relaxed)) return;
  ThreadLog& thread_log = log(role);
  std::lock_guard lock(thread_log.mutex);
  thread_log.events.push_back(std::move(event));
}

void Trace::span(uint32_t track, uint8_t span, uint64_t start_ns, uint64_t end_ns, uint64_t epoch, uint64_t batch,
                 uint64_t samples, const char* role) {
  record(Event{Event::Kind::kSpan, span, track, start_ns, end_ns, epoch, batch, samples, {}}, role);
}

void Trace::count(uint32_t track, Counter counter, uint64_t at_ns, uint64_t value, const char* role) {
  record(Event{Event::Kind::kCount, static_cast<uint8_t>(counter), track, at_ns, at_ns, value, 0, 0, {}}, role);
}

void Trace::skipped(uint32_t track, uint64_t at_ns, uint64_t index, std::string_view key, std::string_view stage,
                    std::string_view reason, const char* role) {
  if (finished_.load(std::memory_order_relaxed)) return;
  std::string text = ",\"key\":\"";
  append_escaped(text, key);
  text += "\",\"stage\":\"";
  append_escaped(text, stage);
  text += "\",\"reason\":\"";
  append_escaped(text, reason);
  text += "\"";
  record(Event{Event::Kind::kSkipped, 0, track, at_ns, at_ns, index, 0, 0, std::move(text)}, role);
}

void Trace::write_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, kWriteInterval);
    lock.unlock();
    drain();
    lock.lock();
  }
}

void Trace::drain() {
  // The logs and tracks as they are now; logs are never removed, so the pointers stay valid.
  std::vector<ThreadLog*> logs;
  std::vector<Track> tracks;
  {
    std::lock_guard lock(mutex_);
    for (const auto& log : logs_) logs.push_back(log.get());
    tracks = tracks_;
  }
  std::string out;
  std::vector<Event> events;
  for (ThreadLog* log : logs) {
    {
      std::lock_guard lock(log->mutex);
      events.swap(log->events);
    }
    for (const Event& event : events) {
      if (event.track >= tracks.size()) continue;
      const Track& track = tracks[event.track];
      auto on_trace_clock = [&](uint64_t ns) {
        const int64_t shifted = static_cast<int64_t>(ns) + track.offset_ns;
        return static_cast<uint64_t>(std::max<int64_t>(0, shifted));
      };
      auto begin = [&](const char* phase) {
        out += first_event_ ? "" : ",\n";
        first_event_ = false;
        out += "{\"ph\":\"";
        out += phase;
        out += "\",\"pid\":" + std::to_string(event.track);
      };
      if (log->named_in.size() <= event.track) log->named_in.resize(event.track + 1, false);
      if (!log->named_in[event.track]) {
        log->named_in[event.track] = true;
        out += first_event_ ? "" : ",\n";
        first_event_ = false;
        append_metadata(out, "thread_name", event.track, &log->tid, log->role + " " + std::to_string(log->tid));
      }
      switch (event.kind) {
        case Event::Kind::kSpan: {
          begin("X");
          out += ",\"tid\":" + std::to_string(log->tid) + ",\"name\":\"";
          append_escaped(out, event.what < track.spans.size() ? track.spans[event.what] : "?");
          out += "\",\"ts\":";
          append_us(out, on_trace_clock(event.start_ns));
          out += ",\"dur\":";
          append_us(out, event.end_ns >= event.start_ns ? event.end_ns - event.start_ns : 0);
          out += ",\"args\":{\"epoch\":" + std::to_string(event.a) + ",\"batch\":" + std::to_string(event.b);
          if (event.c != 0) out += ",\"samples\":" + std::to_string(event.c);
          out += "}}";
          break;
        }
        case Event::Kind::kCount:
          begin("C");
          out += ",\"name\":\"";
          out += kCounterNames[event.what];
          out += "\",\"ts\":";
          append_us(out, on_trace_clock(event.start_ns));
          out += ",\"args\":{\"";
          out += kCounterUnits[event.what];
          out += "\":" + std::to_string(event.a) + "}}";
          break;
        case Event::Kind::kSkipped:
          begin("i");
          out += ",\"tid\":" + std::to_string(log->tid) + ",\"s\":\"t\",\"name\":\"skipped sample\",\"ts\":";
          append_us(out, on_trace_clock(event.start_ns));
          out += ",\"args\":{\"index\":" + std::to_string(event.a) + event.text + "}}";
          break;
      }
    }
    events.clear();
  }
  write(out);
}

void Trace::write(std::string_view text) {
  if (text.empty() || write_failed_) return;
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size()) {
    write_failed_ = true;
    std::fprintf(stderr, "ferry: cannot write the trace '%s': %s; the run goes on without it\n", path_.c_str(),
                 std::strerror(errno));
  }
}

void Trace::finish() {
  if (finished_.exchange(true, std::memory_order_acq_rel)) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  // end_track() may run on a thread the writer is waiting for; never on the writer itself.
  if (writer_.joinable()) writer_.join();
  drain();
  // The tracks' names last: a viewer takes metadata from anywhere in the file.
  std::string out;
  {
    std::lock_guard lock(mutex_);
    for (uint32_t pid = 0; pid < tracks_.size(); ++pid) {
      out += first_event_ ? "" : ",\n";
      first_event_ = false;
      append_metadata(out, "process_name", pid, nullptr, tracks_[pid].name);
      out += ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + std::to_string(pid) +
             ",\"args\":{\"sort_index\":" + std::to_string(pid) + "}}";
    }
  }
  out += "\n]\n";
  write(out);
  if (std::fclose(file_) != 0 && !write_failed_) {
    std::fprintf(stderr, "ferry: cannot write the trace '%s': %s\n", path_.c_str(), std::strerror(errno));
  }
  file_ = nullptr;
}

}  // namespace ferry::detail
