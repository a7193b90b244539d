#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

class DataFile;

/// One regular-file member of a tar shard, as TarIndex found it.
struct TarMember {
  uint64_t header_offset = 0;  // byte offset of its first header (a GNU long-name or pax header if it has one)
  uint64_t data_offset = 0;    // byte offset of its first data byte
  uint64_t size = 0;           // data bytes
  uint32_t extension = 0;      // index into TarIndex::extensions()
};

/// The samples of one WebDataset tar shard: which members each has, where their bytes are.
///
/// In: a tar file (a path, or a DataFile: remote, compressed, piped). The constructor scans it once, reading headers
/// only (it seeks over member data), and validates it as it goes: header checksums, numeric fields, every member's data
/// lying inside the file, the end-of-archive marker, and WebDataset's grouping rule. Anything wrong throws ferry::Error
/// naming the file, the member and the byte offset. See Note [Tar scanning].
///
/// Out: samples in archive order, each a key ("a/b/000123") and its members (extension, data offset,
/// size), and read(), which copies one member's bytes.
///
/// Shares the shard's DataFile (a local file is open while it lives); holds no file position, so any
/// number of threads may call read() at once, without a lock. Everything else is immutable after
/// construction. Memory: about 32 bytes per member plus the key text; no string per member.
class TarIndex {
 public:
  /// Opens and scans `path` (a local file, or what DataStore opens with the default RemoteOptions).
  /// Blocks on I/O; allocates the index. Throws ferry::Error for a file that cannot be opened or is not
  /// a valid WebDataset tar.
  explicit TarIndex(std::string path);
  /// Scans `file` (fetching it first where it is remote, compressed or piped).
  explicit TarIndex(std::shared_ptr<const DataFile> file);

  const std::string& path() const noexcept { return path_; }
  uint64_t file_size() const noexcept { return file_size_; }

  size_t sample_count() const noexcept { return member_begin_.size() - 1; }
  /// The sample's member name up to the first '.' of its last path component, directory kept.
  std::string_view key(size_t sample) const;
  /// The sample's members in archive order (at least one).
  std::span<const TarMember> members(size_t sample) const;
  /// A member's extension: its name after the first '.' of its last path component, lower-cased
  /// ("seg.png"), as WebDataset does.
  const std::string& extension(const TarMember& member) const { return extensions_.at(member.extension); }
  /// Every distinct extension in the shard, in order of first appearance.
  const std::vector<std::string>& extensions() const noexcept { return extensions_; }
  /// The id of an extension (compared lower-cased), if any member has it.
  std::optional<uint32_t> extension_id(std::string_view extension) const;
  /// The sample's member with that extension id, or nullptr. Linear in the sample's members.
  const TarMember* find(size_t sample, uint32_t extension) const;
  /// What stands where a member named `name` (key "." extension) would be when the shard has a link of
  /// that name instead of a file ("a hard link to 'a/x.jpg'"): links carry no data and are skipped, as
  /// WebDataset skips them, and a message about the missing member says so. nullopt when there is none.
  std::optional<std::string> link_named(std::string_view name) const;

  /// Copies the member's `size` bytes to `out`. Thread-safe (pread, locally or from the cache, which
  /// may fetch the shard first); blocks on I/O; allocates nothing. Throws ferry::Error (file, member
  /// offset, the cause) if the read fails or comes up short (the file shrank since it was scanned);
  /// "stopped" when `stop` turns true while it waits for a fetch.
  void read(const TarMember& member, void* out, const std::atomic<bool>* stop = nullptr) const;
  /// The shard's bytes, as read.
  const DataFile& file() const noexcept { return *file_; }

  /// The index as bytes, to be kept beside a fetched shard's cache (Note [kept indexes]).
  std::string serialize() const;
  /// The index serialize() made of `file`, without scanning it; nullopt when `bytes` are not one (another
  /// version, damaged) or not of a file of file->size() bytes... as far as known without fetching it:
  /// `file_size` is the size the shard had when it was indexed.
  static std::optional<TarIndex> deserialize(std::shared_ptr<const DataFile> file, std::string_view bytes);

 private:
  TarIndex() = default;
  void scan();
  uint32_t intern(std::string_view extension);

  std::string path_;
  std::shared_ptr<const DataFile> file_;
  uint64_t file_size_ = 0;
  std::vector<std::string> extensions_;
  std::vector<TarMember> members_;
  std::vector<size_t> member_begin_{0};  // sample s has members_[member_begin_[s], member_begin_[s + 1])
  std::string keys_;                     // every key, back to back
  std::vector<size_t> key_begin_{0};     // sample s's key is keys_[key_begin_[s], key_begin_[s + 1])
  std::map<std::string, std::string, std::less<>> links_;  // link member's name -> "a hard link to '...'"
};

}  // namespace ferry
