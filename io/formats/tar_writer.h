#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry {

/// How TarWriter stores a name longer than the 100-byte name field.
enum class TarLongNames {
  kGnu,          // a "././@LongLink" member of type 'L' before the header (GNU tar); magic "ustar  "
  kPax,          // a pax extended header (type 'x') with a path= record (POSIX.1-2001); magic "ustar"
  kUstarPrefix,  // split at a '/' into the 155-byte prefix and the 100-byte name (POSIX.1-1988)
};

/// Builds a tar archive as TarIndex (and GNU tar, Python's tarfile, WebDataset) reads it: regular
/// files and any other member type, long names in the three dialects, pax global and per-member
/// headers, sizes in octal or GNU base-256 (automatically from 8 GiB, where octal ends). Headers are
/// deterministic (fixed mode, owner and mtime), so the same members give the same bytes.
///
/// In: members, in archive order. Out: the archive's bytes, which the writer keeps until take()
/// hands them over. Two uses:
///  - whole archives in memory (tests of tar readers): add members, then finish() gives every byte;
///    entries() says where each member's header and data are, so a test can damage one field.
///  - streaming (`ferry make-dataset`): after each add(), write take() to an AtomicFile, and at the
///    end finish(). Only the bytes of the member just added are held (and entries(), about 60
///    bytes a member), so a shard of any size costs about the memory of one member. Why take() and
///    not a file inside the writer: the writer stays a copyable value with no I/O of its own and no
///    error paths about files, and the caller picks where the bytes go (a file written under a
///    temporary name and renamed, a socket, a buffer).
///
/// Offsets (entries(), offset()) count from the start of the archive, whatever was taken.
/// Not thread-safe: one thread builds an archive. Allocates as it appends; never blocks.
class TarWriter {
 public:
  struct Entry {
    std::string name;
    uint64_t header_offset = 0;  // its first header (the long-name or pax header, if it has one)
    uint64_t data_offset = 0;
    uint64_t size = 0;
  };

  explicit TarWriter(TarLongNames long_names = TarLongNames::kGnu) : long_names_(long_names) {}

  /// Appends a member (type '0': a regular file; '5': a directory, and so on) with `data`. Throws
  /// ferry::Error for an empty name, or a long name the kUstarPrefix dialect cannot split.
  const Entry& add(const std::string& name, std::string_view data, char type = '0');
  /// Appends a pax global header ('g') with these key=value records.
  void add_pax_global(const std::vector<std::pair<std::string, std::string>>& records);
  /// Appends a pax extended header ('x') with these records; it applies to the next member.
  void add_pax_local(const std::vector<std::pair<std::string, std::string>>& records);
  /// Writes later size fields in GNU base-256 form instead of octal, whatever the size.
  void set_base256_sizes(bool on) { base256_ = on; }

  /// The bytes appended and not yet taken, without the end-of-archive marker.
  const std::string& bytes() const noexcept { return out_; }
  /// Hands over bytes() and forgets them (offsets go on counting from the archive's start).
  std::string take();
  /// bytes(), then the end of the archive: two zero blocks and zero padding to a whole 10240-byte
  /// record (as tar writes), the record counted over the whole archive including what was taken.
  /// Does not change the writer.
  std::string finish() const;
  /// The archive's size so far (taken or not), without the end marker.
  uint64_t offset() const noexcept { return taken_ + out_.size(); }
  /// Every member added, in order. Grows by one entry (about 60 bytes) per member.
  const std::vector<Entry>& entries() const noexcept { return entries_; }

  /// Writes bytes to a file atomically (AtomicFile::write_whole); throws ferry::Error on failure.
  static void write_file(const std::string& path, std::string_view bytes);
  /// The offset of a header's checksum field (to corrupt it) and of its size field.
  static constexpr uint64_t kChecksumField = 148;
  static constexpr uint64_t kSizeField = 124;

 private:
  void header(std::string_view name, std::string_view prefix, uint64_t size, char type);
  void data(std::string_view bytes);
  void pax(const std::vector<std::pair<std::string, std::string>>& records, char type);

  TarLongNames long_names_;
  bool base256_ = false;
  std::string out_;
  uint64_t taken_ = 0;  // bytes handed over by take()
  std::vector<Entry> entries_;
};

}  // namespace ferry
