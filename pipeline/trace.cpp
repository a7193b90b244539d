#include "ferry/pipeline/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <unordered_map>
#include <utility>

#include "ferry/pipeline/error.h"
#include "ferry/pipeline/thread_start.h"
#include "ferry/pipeline/utf8.h"

namespace ferry::detail {
namespace {

// How often the writer moves the threads' events to the file: often enough that their blocks stay few
// (a million events a second is 2.4 MB in 50 ms), seldom enough that its waking goes unnoticed.
constexpr std::chrono::milliseconds kWriteInterval{50};

// The counters' names in the viewer, by Trace::Counter, and the unit each counts.
constexpr const char* kCounterNames[] = {"batches holding a prefetch token", "batches ready for the consumer",
                                         "pinned slabs in use"};
constexpr const char* kCounterUnits[] = {"batches", "batches", "slabs"};

std::atomic<uint64_t> g_next_serial{1};

// The traces open in this process, by file (registry_key()): pipelines naming one file share it. An entry
// stays until its trace has closed the file, so that a new trace never empties a file still written.
struct OpenTrace {
  std::weak_ptr<Trace> trace;
  const Trace* raw = nullptr;  // which trace the entry is, after the weak_ptr expired
};
std::mutex g_open_mutex;
std::map<std::string, OpenTrace>& open_traces() {
  static auto* traces = new std::map<std::string, OpenTrace>();  // never destroyed: used at exit
  return *traces;
}

// One name for a file however it is spelled ("t.json", "./t.json"): its folder's real path and its name.
std::string registry_key(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  char resolved[PATH_MAX];
  if (::realpath(folder.c_str(), resolved) == nullptr) return path;
  return std::string(resolved) + "/" + name;
}

// The thread's log in the trace it last recorded to.
struct CachedLog {
  uint64_t serial = 0;
  void* log = nullptr;
};
thread_local CachedLog t_cached;

// `text` inside a JSON string. Keys and reasons are often file names, which need not be UTF-8: a byte
// that is not part of a well-formed sequence is written as the code point of its value, so a Latin-1
// name shows as written and the file stays valid JSON for strict parsers.
void append_escaped(std::string& out, std::string_view text) { append_json_escaped(out, text, InvalidUtf8::kLatin1); }

void append_number(std::string& out, uint64_t value) {
  char text[24];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  out.append(text, end);
}

// Nanoseconds as the format's microseconds, to the nanosecond.
void append_us(std::string& out, uint64_t ns) {
  append_number(out, ns / 1000);
  const auto fraction = static_cast<unsigned>(ns % 1000);
  const char digits[4] = {'.', static_cast<char>('0' + fraction / 100), static_cast<char>('0' + fraction / 10 % 10),
                          static_cast<char>('0' + fraction % 10)};
  out.append(digits, sizeof digits);
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

Trace::Opened Trace::open(const std::string& path, std::string name, Clock::time_point start,
                          std::vector<std::string> spans) {
  const std::string key = registry_key(path);
  while (true) {
    std::unique_lock lock(g_open_mutex);
    auto& traces = open_traces();
    const auto it = traces.find(key);
    if (it == traces.end()) break;
    if (const std::shared_ptr<Trace> open = it->second.trace.lock()) {
      if (auto track = open->try_add_track(name, start, spans)) return Opened{open, *track};
    }
    // Closing: its last events and the closing bracket are being written. Wait for it to leave.
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::lock_guard lock(g_open_mutex);
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "w"));
  if (!file) throw Error("stats.trace: cannot write '" + path + "': " + std::strerror(errno));
  std::shared_ptr<Trace> trace;
  try {
    trace.reset(new Trace(path, key, std::move(file)));
  } catch (...) {
    (void)::unlink(path.c_str());  // made for nothing
    throw;
  }
  const std::optional<uint32_t> track = trace->try_add_track(std::move(name), start, std::move(spans));
  open_traces()[key] = OpenTrace{trace, trace.get()};
  return Opened{trace, *track};
}

Trace::Trace(std::string path, std::string key, std::unique_ptr<std::FILE, FileCloser> file)
    : path_(std::move(path)),
      key_(std::move(key)),
      origin_(Clock::now()),
      serial_(g_next_serial.fetch_add(1, std::memory_order_relaxed)),
      file_(std::move(file)) {
  write("[\n");
  writer_ = start_thread("the trace writer of " + path_, [this] { write_loop(); });
}

Trace::~Trace() { finish(); }

std::optional<uint32_t> Trace::try_add_track(std::string name, Clock::time_point start,
                                             std::vector<std::string> spans) {
  std::lock_guard lock(mutex_);
  if (closing_) return std::nullopt;
  const auto offset = std::chrono::duration_cast<std::chrono::nanoseconds>(start - origin_).count();
  tracks_.push_back(Track{std::move(name), static_cast<int64_t>(offset), std::move(spans), std::nullopt});
  return static_cast<uint32_t>(tracks_.size() - 1);
}

void Trace::end_track(uint32_t track, uint64_t at_ns) noexcept {
  bool all_ended = true;
  {
    std::lock_guard lock(mutex_);
    if (track < tracks_.size() && !tracks_[track].ended_ns) tracks_[track].ended_ns = at_ns;
    for (const Track& t : tracks_) all_ended = all_ended && t.ended_ns.has_value();
    if (all_ended) closing_ = true;
  }
  if (all_ended) finish();
}

Trace::ThreadLog::ThreadLog() : tail(new Block), head(tail) {}

Trace::ThreadLog::~ThreadLog() {
  for (Block* block = head; block != nullptr;) delete std::exchange(block, block->next.load(std::memory_order_relaxed));
  for (Block* block : spares) delete block;
}

Trace::Block* Trace::ThreadLog::spare_block() noexcept {
  {
    std::lock_guard lock(mutex);
    if (!spares.empty()) {
      Block* block = spares.back();
      spares.pop_back();
      return block;
    }
  }
  return new (std::nothrow) Block;
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

void Trace::record(const Event& event, const char* role) {
  if (finished_.load(std::memory_order_relaxed) || dropping_.load(std::memory_order_relaxed)) return;
  ThreadLog& thread_log = log(role);
  Block* block = thread_log.tail;
  uint32_t size = block->size.load(std::memory_order_relaxed);  // this thread's own store
  if (size == Block::kEvents) {
    Block* next = thread_log.spare_block();
    if (next == nullptr) {
      if (!dropping_.exchange(true, std::memory_order_relaxed)) {  // record nothing more
        std::fprintf(stderr, "ferry: out of memory for the trace '%s'; it ends here and the run goes on\n",
                     path_.c_str());
      }
      return;
    }
    block->next.store(next, std::memory_order_release);
    thread_log.tail = block = next;
    size = 0;
  }
  block->events[size] = event;
  block->size.store(size + 1, std::memory_order_release);  // published: the writer may read it now
}

void Trace::span(uint32_t track, uint8_t span, uint64_t start_ns, uint64_t end_ns, uint64_t epoch, uint64_t batch,
                 uint64_t samples, const char* role) {
  record(Event{Event::Kind::kSpan, span, track, start_ns, end_ns, epoch, batch, samples}, role);
}

void Trace::count(uint32_t track, Counter counter, uint64_t at_ns, uint64_t value, const char* role) {
  record(Event{Event::Kind::kCount, static_cast<uint8_t>(counter), track, at_ns, at_ns, value, 0, 0}, role);
}

void Trace::skipped(uint32_t track, uint64_t at_ns, uint64_t index, std::string_view key, std::string_view stage,
                    std::string_view reason, const char* role) {
  if (finished_.load(std::memory_order_relaxed) || dropping_.load(std::memory_order_relaxed)) return;
  std::string text = ",\"key\":\"";
  append_escaped(text, key);
  text += "\",\"stage\":\"";
  append_escaped(text, stage);
  text += "\",\"reason\":\"";
  append_escaped(text, reason);
  text += "\"";
  // Seldom, and with a text of its own: under the log's lock rather than in its blocks.
  ThreadLog& thread_log = log(role);
  std::lock_guard lock(thread_log.mutex);
  thread_log.skipped.emplace_back(Event{Event::Kind::kSkipped, 0, track, at_ns, at_ns, index, 0, 0}, std::move(text));
}

void Trace::write_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, kWriteInterval);
    lock.unlock();
    try {
      drain();
    } catch (...) {
      dropping_.store(true, std::memory_order_relaxed);  // out of memory: record nothing more, finish as usual
    }
    lock.lock();
  }
}

const std::string& Trace::prefix(ThreadLog& log, const Event& event, const Track& track) {
  const uint64_t key = (uint64_t{event.track} << 16) | (uint64_t{static_cast<uint8_t>(event.kind)} << 8) | event.what;
  std::string& text = log.prefixes[key];
  if (!text.empty()) return text;
  const char* phase = event.kind == Event::Kind::kSpan ? "X" : event.kind == Event::Kind::kCount ? "C" : "i";
  text = std::string("{\"ph\":\"") + phase + "\",\"pid\":" + std::to_string(event.track);
  if (event.kind != Event::Kind::kCount) text += ",\"tid\":" + std::to_string(log.tid);
  text += ",\"name\":\"";
  switch (event.kind) {
    case Event::Kind::kSpan:
      append_escaped(text, event.what < track.spans.size() ? track.spans[event.what] : "?");
      break;
    case Event::Kind::kCount: text += kCounterNames[event.what]; break;
    case Event::Kind::kSkipped: text += "skipped sample\",\"s\":\"t"; break;
  }
  text += "\",\"ts\":";
  return text;
}

void Trace::drain() {
  // The logs as they are now (never removed: the pointers stay valid), what each has published, then
  // the tracks: every event taken belongs to a track copied.
  std::vector<ThreadLog*> logs;
  {
    std::lock_guard lock(mutex_);
    for (const auto& log : logs_) logs.push_back(log.get());
  }
  struct Published {
    Block* block;
    uint32_t size;
  };
  std::vector<std::vector<Published>> published(logs.size());
  for (size_t i = 0; i < logs.size(); ++i) {
    ThreadLog& log = *logs[i];
    for (Block* block = log.head; block != nullptr;) {
      const uint32_t size = block->size.load(std::memory_order_acquire);
      published[i].push_back(Published{block, size});
      block = size == Block::kEvents ? block->next.load(std::memory_order_acquire) : nullptr;
    }
    std::lock_guard lock(log.mutex);
    log.skipped.swap(log.taken_skipped);
  }
  std::vector<Track> tracks;
  {
    std::lock_guard lock(mutex_);
    tracks = tracks_;
  }
  // Up to a million events a second on small batches: each is appended without temporaries, to a
  // buffer that keeps its capacity (a new one each time would fault in fresh pages every time).
  std::string& out = out_;
  out.clear();
  // New tracks' names first: a file cut short by a kill still names its tracks.
  for (uint32_t pid = static_cast<uint32_t>(named_tracks_.size()); pid < tracks.size(); ++pid) {
    out += first_event_ ? "" : ",\n";
    first_event_ = false;
    append_metadata(out, "process_name", pid, nullptr, tracks[pid].name);
    out += ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + std::to_string(pid) +
           ",\"args\":{\"sort_index\":" + std::to_string(pid) + "}}";
    named_tracks_.push_back(true);
  }
  for (size_t i = 0; i < logs.size(); ++i) {
    ThreadLog& log = *logs[i];
    for (const Published& part : published[i]) {
      const uint32_t from = part.block == log.head ? log.read : 0;
      out.reserve(out.size() + (part.size - from) * 128);
      for (uint32_t e = from; e < part.size; ++e) append_event(out, log, part.block->events[e], tracks, nullptr);
    }
    for (const auto& [event, text] : log.taken_skipped) append_event(out, log, event, tracks, &text);
    log.taken_skipped.clear();
    // Every block but the last was read to the end and the thread has left it: back to its spares.
    const size_t done = published[i].size() - 1;
    if (done != 0) {
      std::lock_guard lock(log.mutex);
      log.spares.reserve(log.spares.size() + done);  // may throw: then the chain is as it was
      for (size_t b = 0; b < done; ++b) {
        Block* block = published[i][b].block;
        block->size.store(0, std::memory_order_relaxed);  // the thread takes it under the lock: it sees these
        block->next.store(nullptr, std::memory_order_relaxed);
        log.spares.push_back(block);
      }
    }
    log.head = published[i].back().block;
    log.read = published[i].back().size;
  }
  write(out);
}

void Trace::append_event(std::string& out, ThreadLog& log, const Event& event, const std::vector<Track>& tracks,
                         const std::string* text) {
  if (event.track >= tracks.size()) return;
  const Track& track = tracks[event.track];
  if (track.ended_ns && event.start_ns > *track.ended_ns) return;  // its shutdown
  if (log.named_in.size() <= event.track) log.named_in.resize(event.track + 1, false);
  if (!log.named_in[event.track]) {
    log.named_in[event.track] = true;
    out += first_event_ ? "" : ",\n";
    first_event_ = false;
    append_metadata(out, "thread_name", event.track, &log.tid, log.role + " " + std::to_string(log.tid));
  }
  out += first_event_ ? "" : ",\n";
  first_event_ = false;
  out += prefix(log, event, track);
  append_us(out, static_cast<uint64_t>(std::max<int64_t>(0, static_cast<int64_t>(event.start_ns) + track.offset_ns)));
  switch (event.kind) {
    case Event::Kind::kSpan:
      out += ",\"dur\":";
      append_us(out, event.end_ns >= event.start_ns ? event.end_ns - event.start_ns : 0);
      out += ",\"args\":{\"epoch\":";
      append_number(out, event.a);
      out += ",\"batch\":";
      append_number(out, event.b);
      if (event.c != 0) {
        out += ",\"samples\":";
        append_number(out, event.c);
      }
      out += "}}";
      break;
    case Event::Kind::kCount:
      out += ",\"args\":{\"";
      out += kCounterUnits[event.what];
      out += "\":";
      append_number(out, event.a);
      out += "}}";
      break;
    case Event::Kind::kSkipped:
      out += ",\"args\":{\"index\":";
      append_number(out, event.a);
      if (text != nullptr) out += *text;
      out += "}}";
      break;
  }
}

void Trace::write(std::string_view text) {
  if (text.empty() || dropping_.load(std::memory_order_relaxed)) return;
  // Flushed each time: what a killed run leaves is whole up to its last write.
  if (std::fwrite(text.data(), 1, text.size(), file_.get()) != text.size() || std::fflush(file_.get()) != 0) {
    dropping_.store(true, std::memory_order_relaxed);  // nothing more is recorded
    std::fprintf(stderr, "ferry: cannot write the trace '%s': %s; the run goes on without it\n", path_.c_str(),
                 std::strerror(errno));
  }
}

void Trace::finish() noexcept {
  // A second caller (another pipeline's end, then the destructor) waits here until the file is closed.
  std::call_once(finish_once_, [this]() noexcept {
    finished_.store(true, std::memory_order_release);
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    // end_track() runs on a pipeline's thread, never on the writer.
    if (writer_.joinable()) writer_.join();
    try {
      drain();
      write("\n]\n");
    } catch (...) {
      // Out of memory for the last events: the file ends without them, still readable (Note [trace]).
    }
    if (std::fclose(file_.release()) != 0 && !dropping_.load(std::memory_order_relaxed)) {
      std::fprintf(stderr, "ferry: cannot write the trace '%s': %s\n", path_.c_str(), std::strerror(errno));
    }
    // Written and closed: a new trace of the same file may now empty it.
    std::lock_guard lock(g_open_mutex);
    auto& traces = open_traces();
    if (const auto it = traces.find(key_); it != traces.end() && it->second.raw == this) traces.erase(it);
  });
}

}  // namespace ferry::detail
