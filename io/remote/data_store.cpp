#include "ferry/io/remote/data_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "ferry/io/remote/pipe_command.h"
#include "ferry/io/remote/stream_decoder.h"
#include "ferry/io/util/atomic_file.h"
#include "ferry/io/util/dataset_paths.h"
#include "ferry/io/util/regular_file.h"
#include "ferry/pipeline/error.h"

namespace ferry {

// Note [remote data]
//
// Sources read their files through DataFile, whatever the file is:
//   - a local plain file: pread in place, as always;
//   - a local compressed one (.tar.gz, .tar.zst, .tar.xz; told by its first bytes, not its name): decoded
//     once into the cache, then read there at random;
//   - http://, https://, s3://: fetched whole into the cache (decoded on the way where compressed), or,
//     for a large file read at a few places at a time (Access::kBlocks: a Megatron .bin), in blocks of
//     remote.block_bytes fetched with range requests;
//   - pipe:COMMAND: the command's output, decoded on the way where compressed, into the cache.
// Everything in the cache is an extent of the ShardCache (Note [the shard cache]), fetched ahead in the
// order the run reads, so a small cache does about as well as a large one. Random access inside a
// compressed or piped shard costs one decoding per stay in the cache: shards are best read shard by
// shard (sampler.shuffle_buffer), which is what the planned order fetches.

namespace {

constexpr size_t kLocalChunk = 1 << 20;

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::string default_cache_dir() {
  if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/ferry";
  if (const std::string home = env("HOME"); !home.empty()) return home + "/.cache/ferry";
  return "/tmp/ferry-cache-" + std::to_string(::getuid());
}

// A name's cache key: a hash of all of it, then its last part (readable in `ls`).
std::string key_of(std::string_view text, std::string_view salt = "") {
  uint64_t hash = 1469598103934665603ULL;  // FNV-1a
  for (const std::string_view part : {text, std::string_view("\n"), salt}) {
    for (const char c : part) {
      hash ^= static_cast<unsigned char>(c);
      hash *= 1099511628211ULL;
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  std::string_view base = text.substr(0, text.find_first_of("?#"));
  if (const size_t slash = base.find_last_of("/ "); slash != std::string_view::npos) base.remove_prefix(slash + 1);
  std::string readable;
  for (const char c : base.substr(0, 80)) {
    readable += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  }
  return std::string(hex) + "-" + readable;
}

// The local plain file: pread, as TarIndex always did.
class LocalFile : public DataFile {
 public:
  LocalFile(std::string name, int fd, uint64_t size) : name_(std::move(name)), fd_(fd), size_(size) {}
  ~LocalFile() override { ::close(fd_); }
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return size_; }
  void read(uint64_t offset, size_t size, void* out, const std::atomic<bool>*) const override {
    CachedFile::read_fd(fd_, offset, size, out, name_, size_);
  }

 private:
  std::string name_;
  int fd_;
  uint64_t size_;
};

// What a fetched object was when first fetched: later fetches must find the same.
struct SeenObject {
  std::mutex mutex;
  std::optional<ObjectInfo> info;
  std::optional<ObjectInfo> get() {
    std::lock_guard lock(mutex);
    return info;
  }
  void set_once(const ObjectInfo& seen) {
    std::lock_guard lock(mutex);
    if (!info) info = seen;
  }
  void forget() {
    std::lock_guard lock(mutex);
    info.reset();
  }
};

// A file fetched (or decoded) whole into the cache.
class WholeFile : public DataFile {
 public:
  WholeFile(std::string name, std::shared_ptr<DataStore> store, uint32_t id, std::shared_ptr<SeenObject> seen,
            bool keeps_index)
      : name_(std::move(name)),
        store_(std::move(store)),
        cache_(store_->cache()),
        id_(id),
        seen_(std::move(seen)),
        keeps_index_(keeps_index) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return cache_.get(id_)->size(); }
  void read(uint64_t offset, size_t size, void* out, const std::atomic<bool>* stop) const override {
    cache_.get(id_, stop)->read(offset, size, out, name_);
  }
  void extents(uint64_t, uint64_t, std::vector<uint32_t>& out) const override { out.push_back(id_); }
  std::optional<ObjectInfo> object() const override { return seen_ ? seen_->get() : std::nullopt; }
  void expect(const ObjectInfo& object) const override {
    if (seen_) seen_->set_once(object);
  }
  std::string index_key() const override { return keeps_index_ ? cache_.extent(id_).key : ""; }
  void size_hint(uint64_t bytes) const override { cache_.set_bytes(id_, bytes); }

 private:
  std::string name_;
  std::shared_ptr<DataStore> store_;  // keeps the cache
  ShardCache& cache_;
  uint32_t id_;
  std::shared_ptr<SeenObject> seen_;
  bool keeps_index_;
};

// A large remote file fetched in blocks with range requests.
class BlockFile : public DataFile {
 public:
  BlockFile(std::string name, std::shared_ptr<DataStore> store, ObjectInfo object, uint64_t block,
            std::vector<uint32_t> ids)
      : name_(std::move(name)),
        store_(std::move(store)),
        cache_(store_->cache()),
        object_(std::move(object)),
        block_(block),
        ids_(std::move(ids)) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return object_.size; }
  void read(uint64_t offset, size_t size, void* out, const std::atomic<bool>* stop) const override {
    if (offset > object_.size || size > object_.size - offset) {
      throw Error(name_ + ": bytes " + std::to_string(offset) + "-" + std::to_string(offset + size) + " are past its " +
                  std::to_string(object_.size) + " bytes");
    }
    auto* to = static_cast<char*>(out);
    while (size > 0) {
      const uint64_t b = offset / block_;
      const uint64_t within = offset - b * block_;
      const size_t take = static_cast<size_t>(std::min<uint64_t>(size, block_ - within));
      cache_.get(ids_[b], stop)->read(within, take, to, name_);
      to += take;
      offset += take;
      size -= take;
    }
  }
  void extents(uint64_t offset, uint64_t size, std::vector<uint32_t>& out) const override {
    if (object_.size == 0) return;
    const uint64_t last = std::min(offset + std::max<uint64_t>(size, 1), object_.size) - 1;
    for (uint64_t b = offset / block_; b <= last / block_; ++b) out.push_back(ids_[b]);
  }
  std::optional<ObjectInfo> object() const override { return object_; }

 private:
  std::string name_;
  std::shared_ptr<DataStore> store_;  // keeps the cache
  ShardCache& cache_;
  ObjectInfo object_;
  uint64_t block_;
  std::vector<uint32_t> ids_;
};

}  // namespace

bool is_remote_name(std::string_view name) { return is_remote_url(name) || name.starts_with("pipe:"); }

bool is_plain_local_file(const std::string& name) {
  if (is_remote_name(name)) return false;
  std::string why;
  const int fd = detail::open_regular_file(name, why);
  if (fd < 0) return false;
  char head[6] = {};
  const ssize_t got = ::pread(fd, head, sizeof head, 0);
  ::close(fd);
  return got >= 0 && compression_of(std::string_view(head, static_cast<size_t>(got))).empty();
}

std::shared_ptr<const std::byte> read_whole(const DataFile& file, size_t& bytes) {
  bytes = static_cast<size_t>(file.size());
  if (bytes == 0) return nullptr;
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    throw Error(file.name() + ": no memory for its " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  }
  const size_t size = bytes;
  std::shared_ptr<const std::byte> memory(static_cast<const std::byte*>(data), [size](const std::byte* pages) {
    ::munmap(const_cast<std::byte*>(pages), size);
  });
  file.read(0, bytes, data);
  return memory;
}

std::shared_ptr<DataStore> DataStore::get(const RemoteOptions& options) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<DataStore>> stores;
  RemoteOptions resolved = options;
  if (resolved.cache_dir.empty()) resolved.cache_dir = default_cache_dir();
  std::lock_guard lock(mutex);
  std::weak_ptr<DataStore>& slot = stores[resolved.cache_dir];
  if (auto store = slot.lock()) return store;
  auto store = std::make_shared<DataStore>(std::move(resolved));
  slot = store;
  return store;
}

DataStore::DataStore(RemoteOptions options) : options_(std::move(options)), client_(options_) {
  if (options_.cache_dir.empty()) options_.cache_dir = default_cache_dir();
}

bool DataStore::cache_used() const {
  std::lock_guard lock(mutex_);
  return cache_ != nullptr;
}

RemoteDataStats DataStore::stats() const {
  RemoteDataStats stats;
  std::lock_guard lock(mutex_);
  if (!cache_) return stats;
  stats.used = true;
  stats.cache_dir = options_.cache_dir;
  stats.max_bytes = cache_->options().max_bytes;
  const CacheCounters& counters = cache_->counters();
  stats.fetches = counters.fetches.load(std::memory_order_relaxed);
  stats.fetched_bytes = counters.fetched_bytes.load(std::memory_order_relaxed);
  stats.from_cache_bytes = counters.read_bytes.load(std::memory_order_relaxed);
  stats.evictions = counters.evictions.load(std::memory_order_relaxed);
  stats.wait_seconds = static_cast<double>(counters.wait_ns.load(std::memory_order_relaxed)) * 1e-9;
  const TransferCounters& transfers = client_.counters();
  stats.network_bytes = transfers.bytes.load(std::memory_order_relaxed);
  stats.requests = transfers.requests.load(std::memory_order_relaxed);
  stats.retries = transfers.retries.load(std::memory_order_relaxed);
  return stats;
}

ShardCache& DataStore::cache() {
  std::lock_guard lock(mutex_);
  if (!cache_) {
    ShardCache::Options cache;
    cache.dir = options_.cache_dir;
    cache.prefetch = options_.prefetch;
    cache.fetchers = std::max<size_t>(1, options_.connections / 2);
    cache.max_bytes = options_.max_bytes;
    cache_ = std::make_unique<ShardCache>(cache);
    if (cache.max_bytes == 0) {
      struct statvfs disk {};
      if (::statvfs(options_.cache_dir.c_str(), &disk) == 0) {
        cache_->set_max_bytes(static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize / 2);
      }
    }
  }
  return *cache_;
}

namespace {

// A kept index: the object it was made of (size, ETag), then the index's own bytes.
constexpr std::string_view kKeptMagic = "ferry-kept-index-1\n";

}  // namespace

std::optional<std::string> DataStore::kept_index(const DataFile& file) {
  const std::string key = file.index_key();
  if (key.empty()) return std::nullopt;
  std::ifstream in(options_.cache_dir + "/index/" + key, std::ios::binary);
  if (!in) return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!bytes.starts_with(kKeptMagic)) return std::nullopt;
  std::string_view rest = std::string_view(bytes).substr(kKeptMagic.size());
  const size_t line = rest.find('\n');
  if (line == std::string_view::npos) return std::nullopt;
  // "<size> <etag>"
  const std::string header(rest.substr(0, line));
  const size_t space = header.find(' ');
  ObjectInfo object;
  try {
    object.size = std::stoull(header.substr(0, space));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (space != std::string::npos) object.etag = header.substr(space + 1);
  if (object.size > 0) file.expect(object);
  return std::string(rest.substr(line + 1));
}

void DataStore::keep_index(const DataFile& file, std::string_view index) {
  const std::string key = file.index_key();
  if (key.empty()) return;
  const std::optional<ObjectInfo> object = file.object();
  std::string bytes(kKeptMagic);
  bytes += std::to_string(object ? object->size : 0) + " " + (object ? object->etag : std::string()) + "\n";
  bytes.append(index);
  const std::string folder = options_.cache_dir + "/index";
  ::mkdir(folder.c_str(), 0755);
  try {
    AtomicFile::write_whole(folder + "/" + key, bytes);
  } catch (const std::exception&) {
    // Not kept: the next run indexes it again.
  }
}

void DataStore::drop_index(const std::string& index_key) {
  ::unlink((options_.cache_dir + "/index/" + index_key).c_str());
}

std::shared_ptr<const DataFile> DataStore::open(const std::string& name, Access access, const std::string& what) {
  const std::string label = what + " '" + name + "'";
  if (!is_remote_name(name)) {
    std::string why;
    const int fd = detail::open_regular_file(name, why);
    if (fd < 0) throw Error(label + ": cannot open: " + why);
    struct stat info {};
    char head[6] = {};
    ssize_t got = -1;
    if (::fstat(fd, &info) == 0) got = ::pread(fd, head, sizeof head, 0);
    if (got < 0) {
      const std::string error = std::strerror(errno);
      ::close(fd);
      throw Error(label + ": cannot read: " + error);
    }
    if (!S_ISREG(info.st_mode)) {
      ::close(fd);
      throw Error(label + ": not a regular file");
    }
    const auto size = static_cast<uint64_t>(info.st_size);
    if (compression_of(std::string_view(head, static_cast<size_t>(got))).empty()) {
      return std::make_shared<LocalFile>(name, fd, size);
    }
    ::close(fd);
    // Decoded into the cache; a file changed since (size, time) is another extent.
    CacheExtent extent;
    extent.key = key_of(detail::real_path(name), std::to_string(size) + ":" + std::to_string(info.st_mtim.tv_sec) +
                                                     "." + std::to_string(info.st_mtim.tv_nsec));
    extent.what = label;
    extent.produce = [name, label](const ByteSink& sink, const std::atomic<bool>* stop) {
      std::string failure;
      const int in = detail::open_regular_file(name, failure);
      if (in < 0) throw Error(label + ": cannot open: " + failure);
      StreamDecoder decoder(label, sink);
      std::vector<char> buffer(kLocalChunk);
      try {
        for (;;) {
          if (stop != nullptr && stop->load(std::memory_order_acquire)) throw Error(label + ": stopped");
          const ssize_t got_now = ::read(in, buffer.data(), buffer.size());
          if (got_now < 0 && errno == EINTR) continue;
          if (got_now < 0) throw Error(label + ": cannot read: " + std::strerror(errno));
          if (got_now == 0) break;
          decoder.write(buffer.data(), static_cast<size_t>(got_now));
        }
        decoder.finish();
      } catch (...) {
        ::close(in);
        throw;
      }
      ::close(in);
    };
    ShardCache& shards = cache();
    return std::make_shared<WholeFile>(name, shared_from_this(), shards.add(std::move(extent)), nullptr, true);
  }

  if (name.starts_with("pipe:")) {
    const std::string command = name.substr(5);
    if (command.find_first_not_of(" \t") == std::string::npos) throw Error(label + ": the pipe: names no command");
    CacheExtent extent;
    extent.key = key_of(name);
    extent.what = label;
    const std::chrono::milliseconds timeout = options_.timeout;
    extent.produce = [command, label, timeout](const ByteSink& sink, const std::atomic<bool>* stop) {
      StreamDecoder decoder(label, sink);
      run_pipe(
          command, [&decoder](const char* data, size_t size) { decoder.write(data, size); }, timeout, stop);
      decoder.finish();
    };
    ShardCache& shards = cache();
    return std::make_shared<WholeFile>(name, shared_from_this(), shards.add(std::move(extent)), nullptr, false);
  }

  ShardCache& shards = cache();
  if (access == Access::kBlocks) {
    ObjectInfo object;
    try {
      object = client_.stat(name);
    } catch (const std::exception& e) {
      throw Error(label + ": " + cause_of(e));
    }
    const uint64_t block = std::max<uint64_t>(1, options_.block_bytes);
    std::vector<uint32_t> ids;
    const HttpClient* client = &client_;
    for (uint64_t offset = 0; offset < object.size; offset += block) {
      const uint64_t bytes = std::min(block, object.size - offset);
      CacheExtent extent;
      extent.key = key_of(name, object.etag + "@" + std::to_string(offset) + "+" + std::to_string(bytes));
      extent.what = label + " (bytes " + std::to_string(offset) + "-" + std::to_string(offset + bytes) + ")";
      extent.bytes = bytes;
      extent.produce = [client, name, offset, bytes, object](const ByteSink& sink, const std::atomic<bool>* stop) {
        client->fetch(name, offset, bytes, &object, sink, stop);
      };
      ids.push_back(shards.add(std::move(extent)));
    }
    return std::make_shared<BlockFile>(name, shared_from_this(), std::move(object), block, std::move(ids));
  }
  CacheExtent extent;
  extent.key = key_of(name);
  std::shared_ptr<SeenObject> seen;
  {
    std::lock_guard lock(mutex_);  // one per object: every file opened of it checks the same
    std::shared_ptr<void>& slot = seen_[extent.key];
    if (!slot) slot = std::make_shared<SeenObject>();
    seen = std::static_pointer_cast<SeenObject>(slot);
  }
  extent.what = label;
  const HttpClient* client = &client_;
  const std::weak_ptr<DataStore> weak_store = weak_from_this();
  const std::string key = extent.key;
  extent.produce = [client, name, label, seen, weak_store, key](const ByteSink& sink, const std::atomic<bool>* stop) {
    StreamDecoder decoder(label, sink);
    const std::optional<ObjectInfo> expected = seen->get();
    ObjectInfo now;
    try {
      client->fetch(
          name, 0, std::nullopt, expected ? &*expected : nullptr,
          [&decoder](const char* data, size_t size) { decoder.write(data, size); }, stop, &now);
    } catch (const ChangedObjectError& e) {
      seen->forget();  // the next index of it, made anew, takes the object as it is now
      if (const auto store = weak_store.lock()) store->drop_index(key);
      throw Error(label + ": " + cause_of(e) + " (its kept index is dropped: the next run indexes it anew)");
    } catch (const std::exception& e) {
      throw Error(label + ": " + cause_of(e));
    }
    decoder.finish();
    seen->set_once(now);
  };
  return std::make_shared<WholeFile>(name, shared_from_this(), shards.add(std::move(extent)), seen, true);
}

}  // namespace ferry
