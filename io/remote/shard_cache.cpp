#include "ferry/io/remote/shard_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <system_error>
#include <unordered_set>
#include <utility>

#include "ferry/pipeline/error.h"

namespace ferry {

// Note [the shard cache]
//
// The folder holds data/<key> (whole extents), partial/<key>.<pid>.<n> (fetches under way) and
// locks/<key> (who fetches what). An extent is written to its partial file and renamed into data/ once
// complete, so a reader never sees part of one, and a fetch killed with -9 leaves only a partial file,
// which the next ShardCache removes (its writer's lock on it died with it). The processes that share
// the folder (the ranks of one machine) fetch each extent once: a fetch holds an flock on locks/<key>,
// and another process that wants the extent waits for the lock and then finds the file in data/. flock
// locks die with their process, so a crash never leaves a lock that blocks the next run.
//
// Reading ahead: the pipeline says in which order it reads samples (FetchOrder), and the extents follow
// from the samples. `fetchers` threads fetch up to `prefetch` extents ahead, in the order they will be
// read, dropping what the plan says (Note [fetching ahead, fetching least]): together, the fewest
// fetches any cache of that size can do for the order, give or take the plan's small spare. A reader that needs an
// extent now drops the one read next furthest ahead — never again first, then the least recently used — which is
// Belady's rule. Extents being read are never dropped: a file a reader holds stays open, and follow() refuses a
// max_bytes that cannot hold one extent per reader, so readers never wait for room that cannot come.
//
// Shared by processes, the budget is kept loosely: each process counts the folder's files before it
// fetches. Each drops by its own order and the others': every kPlanExchange it writes the next reads of
// its soonest extents to plans/<pid>-<random>.plan (renamed into place whole) and reads the others' plans, so
// an extent another rank reads soon ranks as soon (steps of different ranks compare as they go at about
// one pace). A plan's lock file, flock'ed by its writer, says it is alive; a plan without is a dead
// process's and is removed. Files nobody's plan reads (another dataset's, stale) go first.

namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kPlanSteps = 500'000;  // steps of an order scanned at once
constexpr auto kPoll = std::chrono::milliseconds(20);
constexpr auto kWaitForReader = std::chrono::seconds(2);        // for a shard another decode thread is finishing
constexpr auto kPlanExchange = std::chrono::milliseconds(200);  // how often the processes' plans are shared
constexpr size_t kPublished = 4096;                             // extents a plan names, the soonest read

std::string errno_text() { return std::system_category().message(errno); }

void make_folder(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    throw Error("remote.cache_dir: cannot create " + path + ": " + errno_text());
  }
}

struct DiskFile {
  std::string key;
  uint64_t bytes = 0;
  int64_t modified = 0;
};

// The extents in data/, every process's.
std::vector<DiskFile> list_files(const std::string& folder) {
  std::vector<DiskFile> files;
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) return files;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    struct stat info {};
    if (::fstatat(::dirfd(dir), entry->d_name, &info, 0) != 0 || !S_ISREG(info.st_mode)) continue;
    files.push_back(DiskFile{entry->d_name, static_cast<uint64_t>(info.st_size), info.st_mtim.tv_sec});
  }
  ::closedir(dir);
  return files;
}

// An flock held until destruction; the file descriptor closes with it.
class FileLock {
 public:
  FileLock() = default;
  explicit FileLock(int fd) : fd_(fd) {}
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileLock& operator=(FileLock&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  bool held() const noexcept { return fd_ >= 0; }

  // The lock on `path` (created where missing), or an unheld FileLock when another process has it.
  static FileLock try_take(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("remote.cache_dir: cannot open the lock " + path + ": " + errno_text());
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      return FileLock();
    }
    return FileLock(fd);
  }

 private:
  int fd_ = -1;
};

}  // namespace

CachedFile::~CachedFile() { ::close(fd_); }

void CachedFile::read(uint64_t offset, size_t size, void* out, const std::string& what) const {
  read_fd(fd_, offset, size, out, what, size_);
  if (counters_ != nullptr) counters_->read_bytes.fetch_add(size, std::memory_order_relaxed);
}

void CachedFile::read_fd(int fd, uint64_t offset, size_t size, void* out, const std::string& what, uint64_t file_size) {
  if (offset > file_size || size > file_size - offset) {
    throw Error(what + ": bytes " + std::to_string(offset) + "-" + std::to_string(offset + size) + " are past its " +
                std::to_string(file_size) + " bytes");
  }
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, static_cast<char*>(out) + done, size - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      throw Error(what + ": reading at byte " + std::to_string(offset + done) +
                  " failed: " + (got < 0 ? errno_text() : std::string("the file is shorter than it was")));
    }
    done += static_cast<size_t>(got);
  }
}

struct ShardCache::Entry {
  CacheExtent extent;
  std::shared_ptr<const CachedFile> file;  // open while present: readers' copies pin it
  bool fetching = false;                   // a thread of this process fetches it
  uint64_t last_used = 0;
  bool prefetch_failed = false;  // left to a reader, who fetches it and hears why it fails
};

ShardCache::ShardCache(Options options) : options_(std::move(options)) {
  if (options_.dir.empty()) throw Error("remote.cache_dir is empty");
  while (options_.dir.size() > 1 && options_.dir.back() == '/') options_.dir.pop_back();
  // The folder and its parents (mkdir -p).
  for (size_t slash = options_.dir.find('/', 1); slash != std::string::npos;
       slash = options_.dir.find('/', slash + 1)) {
    make_folder(options_.dir.substr(0, slash));
  }
  make_folder(options_.dir);
  for (const char* sub : {"/data", "/partial", "/locks", "/plans"}) make_folder(options_.dir + sub);

  // This cache's plan for the others, and the lock that says it is alive. The name is new (created with
  // O_EXCL), never a dead process's: processes in other PID namespaces share pids.
  std::random_device random;
  for (int attempt = 0; plan_lock_ < 0; ++attempt) {
    plan_name_ = std::to_string(::getpid()) + "-" + std::to_string(random()) + std::to_string(random());
    const std::string path = options_.dir + "/plans/" + plan_name_ + ".lock";
    plan_lock_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (plan_lock_ >= 0 && ::flock(plan_lock_, LOCK_EX | LOCK_NB) != 0) {
      ::close(plan_lock_);
      plan_lock_ = -1;
    }
    if (plan_lock_ < 0 && (attempt == 8 || (errno != EEXIST && errno != EWOULDBLOCK))) {
      throw Error("remote.cache_dir: cannot make the lock " + path + ": " + errno_text());
    }
  }

  // Partial files whose writer is gone: it held an flock on its file until it finished or died.
  const std::string partial = options_.dir + "/partial";
  for (const DiskFile& file : list_files(partial)) {
    const std::string path = partial + "/" + file.key;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) ::unlink(path.c_str());
    ::close(fd);
  }
  for (const DiskFile& file : list_files(options_.dir + "/data")) disk_bytes_ += file.bytes;
  threads_.emplace_back([this] { plan_loop(); });
  for (size_t t = 0; t < std::max<size_t>(1, options_.fetchers); ++t)
    threads_.emplace_back([this] { prefetch_loop(); });
}

ShardCache::~ShardCache() {
  stopping_.store(true, std::memory_order_release);
  changed_.notify_all();
  planned_.notify_all();
  for (std::thread& thread : threads_) thread.join();
  for (const char* suffix : {".plan", ".plan.tmp", ".lock"}) {
    ::unlink((options_.dir + "/plans/" + plan_name_ + suffix).c_str());
  }
  ::close(plan_lock_);
}

bool ShardCache::read_other_plans() {
  std::unordered_map<std::string, uint64_t> others;
  const std::string folder = options_.dir + "/plans/";
  for (const DiskFile& file : list_files(folder)) {
    const size_t dot = file.key.rfind(".plan");
    if (dot == std::string::npos || dot + 5 != file.key.size()) continue;
    const std::string name = file.key.substr(0, dot);
    if (name == plan_name_) continue;
    // A plan whose lock nobody holds is a dead process's.
    const std::string lock_path = folder + name + ".lock";
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) continue;  // cannot tell: neither heeded nor removed
    if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      ::unlink((folder + file.key).c_str());
      ::unlink(lock_path.c_str());
      if (fd >= 0) ::close(fd);
      continue;
    }
    ::close(fd);
    std::ifstream in(folder + file.key);
    std::string key;
    uint64_t next = 0;
    while (in >> key >> next) {
      const auto [it, first] = others.emplace(key, next);
      if (!first) it->second = std::min(it->second, next);
    }
  }
  std::lock_guard lock(mutex_);
  const bool changed = others != others_next_;
  others_next_ = std::move(others);
  return changed;
}

void ShardCache::publish_plan(const std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>>& next_use) {
  std::vector<std::pair<uint64_t, std::string>> soonest;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, next] : next_use) soonest.emplace_back(next.first, entries_[id]->extent.key);
  }
  const size_t kept = std::min(soonest.size(), kPublished);
  std::partial_sort(soonest.begin(), soonest.begin() + static_cast<ptrdiff_t>(kept), soonest.end());
  std::string text;
  for (size_t i = 0; i < kept; ++i) text += soonest[i].second + " " + std::to_string(soonest[i].first) + "\n";
  const std::string path = options_.dir + "/plans/" + plan_name_ + ".plan";
  std::ofstream out(path + ".tmp", std::ios::trunc);
  out << text;
  out.close();
  // A plan cut short (a full disk) is not put in place: the others keep the last whole one.
  if (out) ::rename((path + ".tmp").c_str(), path.c_str());
}

uint32_t ShardCache::add(CacheExtent extent) {
  std::lock_guard lock(mutex_);
  if (const auto found = by_key_.find(extent.key); found != by_key_.end()) return found->second;
  const auto id = static_cast<uint32_t>(entries_.size());
  by_key_.emplace(extent.key, id);
  entries_.push_back(std::make_unique<Entry>());
  entries_.back()->extent = std::move(extent);
  return id;
}

const CacheExtent& ShardCache::extent(uint32_t id) const {
  std::lock_guard lock(mutex_);
  return entries_.at(id)->extent;  // entries are never removed: the reference stays valid
}

void ShardCache::set_bytes(uint32_t id, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  entries_.at(id)->extent.bytes = bytes;
}

void ShardCache::set_max_bytes(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  options_.max_bytes = bytes;
}

std::string ShardCache::data_path(const CacheExtent& extent) const { return options_.dir + "/data/" + extent.key; }

uint64_t ShardCache::used_bytes() const {
  uint64_t bytes = 0;
  for (const DiskFile& file : list_files(options_.dir + "/data")) bytes += file.bytes;
  return bytes;
}

ShardCache::Entry& ShardCache::entry_of(uint32_t id) const {
  std::lock_guard lock(mutex_);  // add() may grow entries_ meanwhile; the Entry itself never moves
  return *entries_.at(id);
}

std::shared_ptr<const CachedFile> ShardCache::open_present(uint32_t id) {
  const std::string path = data_path(entry_of(id).extent);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat info {};
  ::fstat(fd, &info);
  return std::make_shared<const CachedFile>(fd, static_cast<uint64_t>(info.st_size), path, &counters_);
}

std::shared_ptr<const CachedFile> ShardCache::get(uint32_t id, const std::atomic<bool>* stop) {
  std::unique_lock lock(mutex_);
  Entry& entry = *entries_.at(id);
  if (entry.file) {
    entry.last_used = ++ticks_;
    return entry.file;
  }
  const auto start = std::chrono::steady_clock::now();
  struct Waited {
    CacheCounters& counters;
    std::chrono::steady_clock::time_point start;
    ~Waited() {
      counters.wait_ns.fetch_add(
          static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count()),
          std::memory_order_relaxed);
    }
  } waited{counters_, start};
  for (;;) {
    if (entry.file) {
      entry.last_used = ++ticks_;
      return entry.file;
    }
    if (stop != nullptr && stop->load(std::memory_order_acquire)) throw Error(entry.extent.what + ": stopped");
    if (!entry.fetching) break;
    changed_.wait_for(lock, kPoll);  // a prefetch of it is under way here
  }
  entry.fetching = true;
  lock.unlock();
  return fetch(id, nullptr, stop);
}

std::shared_ptr<const CachedFile> ShardCache::fetch(uint32_t id, const std::vector<HeldExtent>* drops,
                                                    const std::atomic<bool>* stop) {
  // Called with entry.fetching set by the caller; clears it, whatever happens.
  const bool prefetch = drops != nullptr;
  Entry& entry = entry_of(id);
  const CacheExtent& extent = entry.extent;
  struct Done {
    ShardCache& cache;
    Entry& entry;
    uint64_t reserved = 0;
    ~Done() {
      std::lock_guard lock(cache.mutex_);
      entry.fetching = false;
      cache.inflight_bytes_ -= reserved;
      cache.changes_.fetch_add(1, std::memory_order_relaxed);
      cache.changed_.notify_all();
    }
  } done{*this, entry};

  const std::string path = data_path(extent);
  const auto adopt = [&](std::shared_ptr<const CachedFile> file) {
    std::lock_guard lock(mutex_);
    entry.file = file;
    entry.last_used = ++ticks_;
    return file;
  };
  if (auto file = open_present(id)) return adopt(std::move(file));

  // One process fetches it; the others wait for its file.
  const std::string lock_path = options_.dir + "/locks/" + extent.key;
  FileLock owner = FileLock::try_take(lock_path);
  while (!owner.held()) {
    if (auto file = open_present(id)) return adopt(std::move(file));
    if ((stop != nullptr && stop->load(std::memory_order_acquire)) || (prefetch && stopping_.load())) {
      throw Error(extent.what + ": stopped");
    }
    std::this_thread::sleep_for(kPoll);
    owner = FileLock::try_take(lock_path);
  }
  if (auto file = open_present(id)) return adopt(std::move(file));

  {
    std::unique_lock lock(mutex_);
    done.reserved = extent.bytes;
    inflight_bytes_ += extent.bytes;
  }
  if (prefetch) {
    // What the plan drops for it (Note [fetching ahead, fetching least]).
    std::unique_lock lock(mutex_);
    if (!drop_planned(*drops, lock)) return nullptr;  // no room yet: later
  } else {
    // What is read next furthest ahead (Belady's rule, at the time of need). Where that is a shard another
    // decode thread is finishing (two threads straddle a shard boundary), wait for it rather than drop
    // one kept for later; not for long, in case that thread waits for something this one holds.
    const auto give_up = std::chrono::steady_clock::now() + kWaitForReader;
    for (;;) {
      refresh_plan();  // by where the reading is now
      std::unique_lock lock(mutex_);
      bool in_use = false;
      if (make_room(lock, &in_use) || !in_use || std::chrono::steady_clock::now() > give_up ||
          (stop != nullptr && stop->load(std::memory_order_acquire))) {
        const bool stopped = stop != nullptr && stop->load(std::memory_order_acquire);
        if (in_use && !stopped) make_room(lock, nullptr);  // waited long enough: drop the next best
        break;
      }
      changed_.wait_for(lock, kPoll);
    }
  }

  // The partial file, locked to say it is being written (Note [the shard cache]). Another process's start
  // may remove it between its creation and the lock: then it is made again.
  static std::atomic<uint64_t> serial{0};
  std::string partial;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    partial = options_.dir + "/partial/" + extent.key + "." + std::to_string(::getpid()) + "." +
              std::to_string(serial.fetch_add(1));
    fd = ::open(partial.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(extent.what + ": cannot write its cached copy " + partial + ": " + errno_text());
    struct stat created {};
    if (::flock(fd, LOCK_EX) != 0 || ::fstat(fd, &created) != 0 || created.st_nlink == 0) {
      ::close(fd);
      fd = -1;
      if (attempt == 3) throw Error(extent.what + ": its cached copy " + partial + " was removed as it was made");
    }
  }
  uint64_t written = 0;
  try {
    const std::atomic<bool>* watch = prefetch ? &stopping_ : stop;
    extent.produce(
        [&](const char* data, size_t size) {
          while (size > 0) {
            const ssize_t put = ::write(fd, data, size);
            if (put < 0 && errno == EINTR) continue;
            if (put < 0) {
              throw Error(extent.what + ": writing its cached copy " + partial + " failed: " + errno_text() +
                          (errno == ENOSPC ? " (lower remote.max_bytes, or free space on the cache's disk)" : ""));
            }
            data += put;
            size -= static_cast<size_t>(put);
            written += static_cast<uint64_t>(put);
          }
        },
        watch);
    if (::rename(partial.c_str(), path.c_str()) != 0) {
      throw Error(extent.what + ": cannot move its cached copy into " + path + ": " + errno_text());
    }
  } catch (...) {
    ::unlink(partial.c_str());
    ::close(fd);
    throw;
  }
  ::unlink(lock_path.c_str());  // complete: whoever takes this lock later finds the file first
  counters_.fetched_bytes.fetch_add(written, std::memory_order_relaxed);
  counters_.fetches.fetch_add(1, std::memory_order_relaxed);
  // Read through the descriptor it was written with: the name may be dropped by another process at once.
  auto file = std::make_shared<const CachedFile>(fd, written, path, &counters_);
  std::lock_guard lock(mutex_);
  disk_bytes_ += written;
  entry.extent.bytes = written;
  entry.file = file;
  entry.last_used = ++ticks_;
  entry.prefetch_failed = false;
  return file;
}

void ShardCache::drop(const std::string& key, uint64_t bytes, Entry* entry) {
  ::unlink((options_.dir + "/data/" + key).c_str());
  disk_bytes_ -= std::min(disk_bytes_, bytes);
  counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  changes_.fetch_add(1, std::memory_order_relaxed);
  if (entry != nullptr) entry->file.reset();
}

bool ShardCache::make_room(std::unique_lock<std::mutex>& lock, bool* in_use) {
  (void)lock;  // held
  if (options_.max_bytes == 0) return true;
  // The folder as every process left it (counted afresh: the others add to it too).
  const std::vector<DiskFile> files = list_files(options_.dir + "/data");
  disk_bytes_ = 0;
  for (const DiskFile& file : files) disk_bytes_ += file.bytes;
  if (disk_bytes_ + inflight_bytes_ <= options_.max_bytes) return true;
  struct Candidate {
    std::string key;
    uint64_t bytes;
    uint64_t next;
    uint64_t recency;
    Entry* entry;
    bool in_use;
  };
  std::vector<Candidate> candidates;
  for (auto& entry : entries_) {
    struct stat info {};
    if (entry->file && entry->file.use_count() == 1 && ::fstat(entry->file->fd(), &info) == 0 && info.st_nlink == 0) {
      entry->file.reset();  // dropped by another process
    }
  }
  for (const DiskFile& file : files) {
    const auto found = by_key_.find(file.key);
    Entry* entry = found == by_key_.end() ? nullptr : entries_[found->second].get();
    if (entry != nullptr && entry->fetching) continue;
    const auto next = entry == nullptr ? next_use_.end() : next_use_.find(found->second);
    // One being read (a reader holds it, or the reading is within a run of reads of it) ranks by its
    // read after that run: it is the one to drop once that run is over.
    const bool reading = next != next_use_.end() && next->second.first == 0;
    const bool held = entry != nullptr && entry->file && entry->file.use_count() > 1;
    const auto others = others_next_.find(file.key);
    const uint64_t own = next == next_use_.end() ? kNever : reading ? next->second.second : next->second.first;
    candidates.push_back(
        Candidate{file.key, file.bytes, std::min(own, others == others_next_.end() ? kNever : others->second),
                  entry != nullptr ? entry->last_used : static_cast<uint64_t>(file.modified), entry, reading || held});
  }
  // Read next furthest ahead first; never-again ones by least recent use.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.next != b.next ? a.next > b.next : a.recency < b.recency;
  });
  for (const Candidate& candidate : candidates) {
    if (disk_bytes_ + inflight_bytes_ <= options_.max_bytes) break;
    if (candidate.in_use) {
      if (in_use != nullptr) {
        *in_use = true;  // the one to drop is still being read: wait for it
        return false;
      }
      continue;
    }
    drop(candidate.key, candidate.bytes, candidate.entry);
  }
  return disk_bytes_ + inflight_bytes_ <= options_.max_bytes;
}

bool ShardCache::drop_planned(const std::vector<HeldExtent>& drops, std::unique_lock<std::mutex>& lock) {
  (void)lock;  // held
  if (options_.max_bytes == 0) return true;
  std::vector<std::pair<std::string, Entry*>> dropping;
  for (const HeldExtent& planned : drops) {
    // An extent the plan fetches and drops again has no key in the plan: it was not in the cache then.
    const std::string& key = planned.key.empty() && planned.id ? entries_.at(*planned.id)->extent.key : planned.key;
    const auto found = by_key_.find(key);
    Entry* entry = found == by_key_.end() ? nullptr : entries_[found->second].get();
    // A reader still has one, for a moment (its last read): none is dropped yet, all are later.
    if (entry != nullptr && (entry->fetching || (entry->file && entry->file.use_count() > 1))) return false;
    dropping.emplace_back(key, entry);
  }
  for (const auto& [key, entry] : dropping) {
    struct stat info {};
    if (::stat((options_.dir + "/data/" + key).c_str(), &info) == 0)
      drop(key, static_cast<uint64_t>(info.st_size), entry);
  }
  disk_bytes_ = used_bytes();
  return disk_bytes_ + inflight_bytes_ <= options_.max_bytes;
}

// A run's order as runs of steps reading each extent, scanned once per stretch of kPlanSteps.
struct ShardCache::Followed {
  std::weak_ptr<const FetchOrder> order;
  bool scanned = false;
  bool ended = false;  // the stretch reaches the order's end
  uint64_t from = 0;
  uint64_t last_reached = kNever;
  ReadsAhead reads;  // in the order's steps

  void scan(const FetchOrder& steps, uint64_t start) {
    reads = ReadsAhead();
    scanned = true;
    ended = false;
    from = start;
    std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> open;  // each extent's run so far
    std::vector<uint32_t> ids;
    for (uint64_t step = start; step < start + kPlanSteps; ++step) {
      ids.clear();
      if (!steps.extents_at(step, ids)) {
        ended = true;
        break;
      }
      for (const uint32_t id : ids) {
        const auto [run, first] = open.try_emplace(id, step, step);
        if (first) continue;
        if (run->second.second + 1 < step) {
          reads.add(id, run->second.first, run->second.second);
          run->second.first = step;
        }
        run->second.second = step;
      }
    }
    for (const auto& [id, run] : open) reads.add(id, run.first, run.second);
    reads.finish();
  }
};

void ShardCache::follow(const std::shared_ptr<const FetchOrder>& order, size_t readers) {
  uint64_t largest = 0;
  std::vector<uint32_t> ids;
  for (uint64_t step = order->reached(); step < order->reached() + 100'000; ++step) {
    ids.clear();
    if (!order->extents_at(step, ids)) break;
    std::lock_guard lock(mutex_);
    for (const uint32_t id : ids) largest = std::max(largest, entries_.at(id)->extent.bytes);
  }
  if (options_.max_bytes != 0 && options_.max_bytes < largest * std::max<size_t>(1, readers)) {
    throw Error("remote.max_bytes (" + std::to_string(options_.max_bytes) + " bytes) cannot hold the " +
                std::to_string(readers) + " shards the decode threads read at once (the largest is " +
                std::to_string(largest) + " bytes): raise it to at least " + std::to_string(largest * readers) +
                ", or use fewer decode threads");
  }
  {
    std::lock_guard lock(mutex_);
    orders_.push_back(std::make_unique<Followed>());
    orders_.back()->order = order;
  }
  refresh_plan();
  planned_.notify_all();
}

void ShardCache::refresh_plan() {
  std::lock_guard planning(plan_mutex_);
  std::vector<std::pair<std::shared_ptr<const FetchOrder>, Followed*>> orders;
  {
    std::lock_guard lock(mutex_);
    std::erase_if(orders_, [](const std::unique_ptr<Followed>& followed) { return followed->order.expired(); });
    for (const auto& followed : orders_) {
      if (auto order = followed->order.lock()) orders.emplace_back(std::move(order), followed.get());
    }
  }
  // The other processes' plans, and this one's for them, every kPlanExchange.
  const auto now = std::chrono::steady_clock::now();
  const bool exchange = now - plans_exchanged_ >= kPlanExchange;
  const bool others_changed = exchange && read_other_plans();
  if (exchange) plans_exchanged_ = now;

  // Nothing to do where no reading moved and no extent came or went.
  const uint64_t changes = changes_.load(std::memory_order_relaxed);
  bool moved = changes != planned_changes_ || others_changed || exchange;
  for (auto& [order, followed] : orders) {
    const uint64_t reached = order->reached();
    moved = moved || reached != followed->last_reached;
    followed->last_reached = reached;
  }
  if (!moved) return;
  planned_changes_ = changes;

  // The reads ahead, steps counted from each order's reading point: orders of several pipelines compare
  // by how soon.
  for (auto& [order, followed] : orders) {
    const uint64_t reached = followed->last_reached;
    if (!followed->scanned || (!followed->ended && reached >= followed->from + kPlanSteps / 2)) {
      followed->scan(*order, reached);
    }
    followed->reads.set_origin(reached);
  }
  ReadsAhead merged;
  const ReadsAhead* reads = &merged;
  if (orders.size() == 1) {
    reads = &orders.front().second->reads;
  } else {
    for (auto& [order, followed] : orders) merged.add(followed->reads);
    merged.finish();
  }

  // What the folder holds (every process's extents), and the fetches under way here.
  const std::vector<DiskFile> files = list_files(options_.dir + "/data");
  std::vector<HeldExtent> held;
  std::vector<uint64_t> sizes;
  uint64_t max_bytes = 0, spare = 0;
  {
    std::lock_guard lock(mutex_);
    max_bytes = options_.max_bytes;
    spare = spare_fetches(counters_.fetches.load(std::memory_order_relaxed), spent_);
    uint64_t known = 0, count = 0;
    for (const auto& entry : entries_) {
      sizes.push_back(entry->extent.bytes);
      known += entry->extent.bytes;
      count += entry->extent.bytes != 0 ? 1 : 0;
    }
    // An extent not fetched or indexed yet is guessed as large as the others.
    for (uint64_t& size : sizes) size = size != 0 ? size : count != 0 ? known / count : 0;
    std::unordered_set<std::string> on_disk;
    for (const DiskFile& file : files) {
      on_disk.insert(file.key);
      const auto found = by_key_.find(file.key);
      const Entry* entry = found == by_key_.end() ? nullptr : entries_[found->second].get();
      const auto others = others_next_.find(file.key);
      held.push_back(HeldExtent{file.key, entry != nullptr ? std::optional<uint32_t>(found->second) : std::nullopt,
                                file.bytes, entry != nullptr ? entry->last_used : 0,
                                entry != nullptr && entry->fetching,
                                others == others_next_.end() ? kNoRead : others->second});
    }
    for (uint32_t id = 0; id < entries_.size(); ++id) {
      const Entry& entry = *entries_[id];
      if (entry.fetching && on_disk.count(entry.extent.key) == 0) {
        held.push_back(HeldExtent{entry.extent.key, id, sizes[id], entry.last_used, true});
      }
    }
  }
  std::vector<PlannedFetch> plan = plan_fetches(
      *reads, held, max_bytes, options_.prefetch, [&](uint32_t id) { return sizes.at(id); }, spare);
  // Each extent's next read, and for one read now, its read after that run.
  std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> next_use;
  for (const auto& [id, next] : reads->first_reads()) {
    next_use.emplace(id, std::pair{next, next == 0 ? reads->next_read(id, reads->next_run(id, 0).second + 1) : next});
  }
  if (exchange) publish_plan(next_use);
  std::lock_guard lock(mutex_);
  next_use_ = std::move(next_use);
  plan_ = std::move(plan);
}

void ShardCache::plan_loop() {
  while (!stopping_.load(std::memory_order_acquire)) {
    refresh_plan();
    std::unique_lock lock(mutex_);
    changed_.notify_all();
    planned_.wait_for(lock, kPoll);
  }
}

void ShardCache::prefetch_loop() {
  while (!stopping_.load(std::memory_order_acquire)) {
    std::optional<PlannedFetch> pick;
    {
      std::unique_lock lock(mutex_);
      for (const PlannedFetch& planned : plan_) {
        Entry& entry = *entries_[planned.id];
        if (!entry.file && !entry.fetching && !entry.prefetch_failed) {
          entry.fetching = true;
          spent_ += planned.extra;  // at once: the plans made meanwhile must not spend it again
          pick = planned;
          break;
        }
      }
      if (!pick) {
        changed_.wait_for(lock, kPoll);
        continue;
      }
    }
    bool fetched = false;
    try {
      fetched = fetch(pick->id, &pick->drops, nullptr) != nullptr;
    } catch (const std::exception&) {
      std::lock_guard lock(mutex_);
      entries_[pick->id]->prefetch_failed = true;
    }
    if (!fetched && pick->extra != 0) {
      std::lock_guard lock(mutex_);
      spent_ -= pick->extra;  // not fetched after all
    }
    planned_.notify_one();
    if (!fetched) {
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, kPoll);  // no room yet, or failed: wait for reading to move on
    }
  }
}

}  // namespace ferry
