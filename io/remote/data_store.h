#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ferry/io/remote/http_client.h"
#include "ferry/io/remote/shard_cache.h"
#include "ferry/io/util/remote_options.h"
#include "ferry/pipeline/pipeline_stats.h"

// Data files wherever they are: local, over HTTP(S) or S3, a command's output; compressed or not.
// Internal: not installed.

namespace ferry {

/// Random access to the bytes of one data file. Thread-safe: read() is called from any thread.
class DataFile {
 public:
  virtual ~DataFile() = default;
  /// As the user named it: a path, a URL, "pipe:COMMAND".
  virtual const std::string& name() const = 0;
  /// Its bytes (decompressed). May fetch it (a compressed or piped file is known once decoded).
  virtual uint64_t size() const = 0;
  /// Copies bytes [offset, offset + size) to `out`, fetching what is not at hand; blocks. Throws
  /// ferry::Error naming the file (and the URL's or command's failure); "stopped" when `stop` turns true.
  virtual void read(uint64_t offset, size_t size, void* out, const std::atomic<bool>* stop = nullptr) const = 0;
  /// Appends the cache extents that reading [offset, offset + size) takes: what a FetchOrder prefetches.
  /// None for a local file read in place.
  virtual void extents(uint64_t offset, uint64_t size, std::vector<uint32_t>& out) const {
    (void)offset;
    (void)size;
    (void)out;
  }
  /// For a fetched file: what the object was when it was first read (size, ETag), to check later fetches
  /// against; nullopt where it is not remote or not fetched yet.
  virtual std::optional<ObjectInfo> object() const { return std::nullopt; }
  /// Says what the object must still be (from an index made before): a fetch of another is an error.
  virtual void expect(const ObjectInfo& object) const { (void)object; }
  /// Tells a fetched file the bytes it will have (from a kept index), so that room is made for them
  /// before it is fetched.
  virtual void size_hint(uint64_t bytes) const { (void)bytes; }
  /// The name an index of it is kept under in the cache (Note [kept indexes] in tar_index.cpp): "" where
  /// none is kept (a local plain file, indexed in no time; a command, whose output may differ next time).
  virtual std::string index_key() const { return ""; }
};

/// Whether `name` is a URL (http://, https://, s3://) or a `pipe:` command rather than a local path.
bool is_remote_name(std::string_view name);

/// Whether `name` is a local file whose first bytes say no compression: one a reader may map as it is.
/// False for a file that cannot be read (opening it through a DataStore says why).
bool is_plain_local_file(const std::string& name);

/// All of `file`'s bytes in memory (anonymous pages, returned to the system when the last copy of the
/// pointer goes), fetching it first; `bytes` is set to its size (null for an empty file). For what is
/// read all over many times (a .jsonl, a Megatron .idx). Throws as DataFile::read.
std::shared_ptr<const std::byte> read_whole(const DataFile& file, size_t& bytes);

/// Opens data files of any kind for the sources (Note [remote data]): a local plain file is read in place
/// (pread); a URL, a `pipe:` command and a compressed file (gzip, zstd, xz, told by its first bytes) go
/// through the ShardCache, whole or, for a large remote file read at random, in blocks.
///
/// One per cache folder in a process: get() gives the sources of a run (and a mixture's parts) the same
/// one, so they share one cache budget, one set of connections and one prefetch. Thread-safe. Owns the
/// HTTP client and, from the first file that needs it, the cache (its folder is not touched before); the
/// files it opens keep it alive. Made by get() only (open() needs the shared pointer).
class DataStore : public std::enable_shared_from_this<DataStore> {
 public:
  /// The store for `options`' cache folder (its default: $XDG_CACHE_HOME/ferry, ~/.cache/ferry).
  static std::shared_ptr<DataStore> get(const RemoteOptions& options);
  explicit DataStore(RemoteOptions options);

  enum class Access {
    kWhole,   // read all over (a tar shard, a .jsonl, an .idx): fetched and cached whole
    kBlocks,  // a large file read at a few places at a time (a Megatron .bin): fetched in blocks
  };
  /// The file `name` names. Throws ferry::Error naming it (`what`: "tar shard", ...) for a local file that
  /// cannot be opened or a remote one that does not answer a HEAD (kBlocks needs its size first).
  std::shared_ptr<const DataFile> open(const std::string& name, Access access, const std::string& what);

  /// The cache, made on first use.
  ShardCache& cache();
  const HttpClient& client() const noexcept { return client_; }
  const RemoteOptions& options() const noexcept { return options_; }
  /// Whether the cache has been made (something was fetched or decoded).
  bool cache_used() const;
  /// What was fetched so far, through this store (`used` false before the cache is made).
  RemoteDataStats stats() const;

  /// An index of `file` kept by keep_index() (in an earlier run, or by another rank), with the object it
  /// was made of told to the file (DataFile::expect); nullopt when there is none.
  std::optional<std::string> kept_index(const DataFile& file);
  /// Keeps `index` for `file` (atomically), with the object it was made of; nothing where the file has
  /// no index_key(). A failure to write it is no error: the next run indexes again.
  void keep_index(const DataFile& file, std::string_view index);
  /// Drops the kept index of the file with `index_key` (it no longer fits the object).
  void drop_index(const std::string& index_key);

 private:
  RemoteOptions options_;
  HttpClient client_;
  mutable std::mutex mutex_;
  std::unique_ptr<ShardCache> cache_;
  /// Per fetched object (by extent key): what it was when first fetched or indexed (SeenObject).
  std::unordered_map<std::string, std::shared_ptr<void>> seen_;
};

}  // namespace ferry
