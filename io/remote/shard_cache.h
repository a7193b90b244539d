#pragma once

#include <atomic>
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
  /// The first step not read yet.
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

  /// Creates the folder (and its data/, partial/ and locks/) where missing, and removes the partial files
  /// of fetches whose process is gone. Throws ferry::Error naming the folder when it cannot.
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
  Entry& entry_of(uint32_t id) const;
  std::shared_ptr<const CachedFile> open_present(uint32_t id);
  std::shared_ptr<const CachedFile> fetch(uint32_t id, bool prefetch, const std::atomic<bool>* stop);
  /// Drops extents (furthest next read first) until the folder and the fetches under way fit max_bytes,
  /// none read at or before `before_step` (0: any not in use). Whether they fit.
  bool make_room(uint64_t before_step, std::unique_lock<std::mutex>& lock);
  void refresh_plan();
  void plan_loop();
  void prefetch_loop();
  std::string data_path(const CacheExtent& extent) const;

  Options options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;  // an extent arrived or a fetch ended; a new plan
  std::condition_variable planned_;  // time to plan again
  std::vector<std::unique_ptr<Entry>> entries_;
  std::unordered_map<std::string, uint32_t> by_key_;
  std::vector<std::weak_ptr<const FetchOrder>> orders_;
  /// The planned reads (refresh_plan()): each extent's next step, and the extents not present, in order.
  std::unordered_map<uint32_t, uint64_t> next_use_;
  std::vector<uint32_t> wanted_;
  uint64_t window_span_ = 0;  // steps from the reading to the last extent of the prefetch window
  uint64_t inflight_bytes_ = 0;
  uint64_t disk_bytes_ = 0;  // the data folder's bytes at the last scan, plus what this process added since
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
  CacheCounters counters_;
};

}  // namespace ferry
