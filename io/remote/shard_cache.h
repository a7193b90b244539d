#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ferry/io/remote/fetch_plan.h"

// The local cache of fetched and decoded shards, filled in the order they will be read. Internal: not
// installed.

namespace ferry {

/// What the cache keeps as one file: a whole shard as fetched (decoded, where it is compressed or a
/// command's output), or a block of a large file read at random.
struct CacheExtent {
  /// Names its file: the same data has the same key in every process and run ("<hash>-shard-000003.tar").
  std::string key;
  /// For messages: the URL, path or command it comes from ("https://host/d/shard-000003.tar").
  std::string what;
  /// Its bytes once fetched, as far as known before (0: unknown); used to make room for it.
  uint64_t bytes = 0;
  /// Writes its bytes to the sink, in order, once; throws ferry::Error for what failed (naming `what`).
  /// Called on a cache thread or a reader's, watching `stop`.
  std::function<void(const std::function<void(const char*, size_t)>& sink, const std::atomic<bool>* stop)> produce;
};

struct CacheCounters;

/// An extent's file in the cache, open for reading: it stays readable while this lives, even if the
/// cache drops the file meanwhile.
class CachedFile {
 public:
  /// `counters` (may be null) counts the bytes read.
  CachedFile(int fd, uint64_t size, std::string path, CacheCounters* counters = nullptr)
      : fd_(fd), size_(size), path_(std::move(path)), counters_(counters) {}
  ~CachedFile();
  CachedFile(const CachedFile&) = delete;
  CachedFile& operator=(const CachedFile&) = delete;
  int fd() const noexcept { return fd_; }
  uint64_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }
  /// Copies bytes [offset, offset + size) to `out` (pread). Throws ferry::Error naming `what` for a
  /// range past the end or a failed read.
  void read(uint64_t offset, size_t size, void* out, const std::string& what) const;
  /// read() on any descriptor of a file of `file_size` bytes.
  static void read_fd(int fd, uint64_t offset, size_t size, void* out, const std::string& what, uint64_t file_size);

 private:
  int fd_;
  uint64_t size_;
  std::string path_;
  CacheCounters* counters_;
};

/// The extents a run will read, in order, for prefetching.
class FetchOrder {
 public:
  virtual ~FetchOrder() = default;
  /// Appends the extents (CacheExtent ids) read at `step` of the run; false past the run's end.
  virtual bool extents_at(uint64_t step, std::vector<uint32_t>& out) const = 0;
  /// The first step whose read may not have finished: what only earlier steps read may be dropped.
  virtual uint64_t reached() const = 0;
};

/// Bytes the cache moved, for the report. Relaxed atomics.
struct CacheCounters {
  std::atomic<uint64_t> fetched_bytes{0};  // written into the cache by fetches (decoded size)
  std::atomic<uint64_t> fetches{0};        // extents fetched
  std::atomic<uint64_t> read_bytes{0};     // read by the sources from the extents (CachedFile::read)
  std::atomic<uint64_t> evictions{0};
  std::atomic<uint64_t> wait_ns{0};  // readers' time waiting for an extent to arrive
};

/// Note [the shard cache]: a folder of whole extents, fetched ahead along the runs' orders, dropping the
/// one needed furthest ahead when room is needed, shared by the processes that name the same folder.
///
/// In: extents (add()), the orders that read them (follow()). Out: get(), an open file of the extent's
/// bytes, fetched first when it is not there. Thread-safe: readers call get() from any thread; `fetchers`
/// threads of its own fetch ahead. Owns those threads (joined by the destructor), the open files of
/// extents it holds, and nothing of the folder but the files it wrote.
class ShardCache {
 public:
  struct Options {
    std::string dir;
    uint64_t max_bytes = 0;
    size_t prefetch = 8;  // extents fetched ahead of the reading
    size_t fetchers = 4;  // threads fetching ahead
  };

  /// Creates the folder (and its data/, partial/, locks/ and plans/) where missing, and removes the
  /// partial files of fetches whose process is gone. Throws ferry::Error naming the folder when it cannot.
  explicit ShardCache(Options options);
  ~ShardCache();
  ShardCache(const ShardCache&) = delete;
  ShardCache& operator=(const ShardCache&) = delete;

  /// Registers an extent; one with a key added before gets that one's id. Thread-safe.
  uint32_t add(CacheExtent extent);
  const CacheExtent& extent(uint32_t id) const;
  /// Updates what an extent's size is known to be (once fetched or indexed).
  void set_bytes(uint32_t id, uint64_t bytes);

  /// The extent's file, fetched first where no process has it yet (waiting for a fetch under way, in
  /// this process or another). Blocks; throws ferry::Error for a failed fetch, "stopped" when `stop`
  /// turns true. The extent is not dropped while the returned file lives.
  std::shared_ptr<const CachedFile> get(uint32_t id, const std::atomic<bool>* stop = nullptr);

  /// Fetches ahead along `order` until it ends or its last owner lets it go (kept as a weak pointer).
  /// `readers`: extents read at once (decode threads). Throws ferry::Error when max_bytes cannot hold
  /// `readers` of the largest extent the order reads (checked over its first steps).
  void follow(const std::shared_ptr<const FetchOrder>& order, size_t readers);

  const CacheCounters& counters() const noexcept { return counters_; }
  const Options& options() const noexcept { return options_; }
  /// Sets max_bytes (before anything is fetched: a default that depends on the folder's disk).
  void set_max_bytes(uint64_t bytes);
  /// Bytes of the extents in the folder now (every process's).
  uint64_t used_bytes() const;

 private:
  struct Entry;
  struct Followed;
  Entry& entry_of(uint32_t id) const;
  std::shared_ptr<const CachedFile> open_present(uint32_t id);
  /// Fetches extent `id`: ahead of the reading where `drops` is given (what the plan drops for it), else
  /// for a reader. Null for a fetch ahead that finds no room yet (a later plan tries again).
  std::shared_ptr<const CachedFile> fetch(uint32_t id, const std::vector<HeldExtent>* drops,
                                          const std::atomic<bool>* stop);
  /// For a reader's fetch: drops extents (read next furthest ahead first) until the folder and the
  /// fetches under way fit max_bytes, none in use. Whether they fit. Where `in_use` is given and the one to
  /// drop next is still being read, drops nothing more, sets it and returns false.
  bool make_room(std::unique_lock<std::mutex>& lock, bool* in_use = nullptr);
  /// For a fetch ahead: drops what the plan drops for it, where none is in use. Whether it then fits.
  bool drop_planned(const std::vector<HeldExtent>& drops, std::unique_lock<std::mutex>& lock);
  void drop(const std::string& key, uint64_t bytes, Entry* entry);
  /// Plans again where the reading moved or the folder changed (Note [fetching ahead, fetching least]).
  void refresh_plan();
  /// Reads the plans of the other caches on this folder into others_next_, removing dead processes'.
  /// Whether they changed.
  bool read_other_plans();
  /// Writes this cache's next reads (the soonest kPublished) for the others.
  void publish_plan(const std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>>& next_use);
  void plan_loop();
  void prefetch_loop();
  std::string data_path(const CacheExtent& extent) const;

  Options options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;  // an extent arrived or a fetch ended; a new plan
  std::condition_variable planned_;  // time to plan again
  std::vector<std::unique_ptr<Entry>> entries_;
  std::unordered_map<std::string, uint32_t> by_key_;
  std::vector<std::unique_ptr<Followed>> orders_;
  std::mutex plan_mutex_;  // one refresh_plan() at a time; taken before mutex_, never while holding it
  /// The plan (refresh_plan()): each extent's next read, in steps from the reading (and for one read
  /// now, its next read after that run), and the fetches to start now, in order.
  std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> next_use_;
  std::vector<PlannedFetch> plan_;
  std::atomic<uint64_t> changes_{0};  // extents fetched and dropped: a reason to plan again
  uint64_t planned_changes_ = 0;      // changes_ at the last plan (under plan_mutex_)
  uint64_t spent_ = 0;                // fetches started beyond the fewest, as their plans counted them
  /// The other processes on this folder (Note [the shard cache]): each key's soonest next read by one of
  /// them, from their plans; this cache's plan file and the lock that says it is alive.
  std::unordered_map<std::string, uint64_t> others_next_;
  std::chrono::steady_clock::time_point plans_exchanged_{};  // under plan_mutex_
  std::string plan_name_;
  int plan_lock_ = -1;
  uint64_t ticks_ = 0;  // orders the extents' uses (Entry::last_used), under mutex_
  uint64_t inflight_bytes_ = 0;
  uint64_t disk_bytes_ = 0;  // the data folder's bytes at the last scan, plus what this process added since
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
  CacheCounters counters_;
};

}  // namespace ferry
