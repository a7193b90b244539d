#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry::testing {

/// How TarWriter stores a name longer than the 100-byte name field.
enum class TarLongNames {
  kGnu,          // a "././@LongLink" member of type 'L' before the header (GNU tar); magic "ustar  "
  kPax,          // a pax extended header (type 'x') with a path= record (POSIX.1-2001); magic "ustar"
  kUstarPrefix,  // split at a '/' into the 155-byte prefix and the 100-byte name (POSIX.1-1988)
};

/// Builds a tar archive in memory, for tests of tar readers: regular files and any other member
/// type, long names in the three dialects, pax global headers, base-256 sizes. Records where each
/// entry's header and data are, so tests can corrupt exactly one field. Single-threaded.
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
  /// std::invalid_argument for a long name the kUstarPrefix dialect cannot split.
  const Entry& add(const std::string& name, std::string_view data, char type = '0');
  /// Appends a pax global header ('g') with these key=value records.
  void add_pax_global(const std::vector<std::pair<std::string, std::string>>& records);
  /// Appends a pax extended header ('x') with these records; it applies to the next member.
  void add_pax_local(const std::vector<std::pair<std::string, std::string>>& records);
  /// Writes later size fields in GNU base-256 form instead of octal.
  void set_base256_sizes(bool on) { base256_ = on; }

  /// The members so far, without the end-of-archive marker.
  const std::string& bytes() const noexcept { return out_; }
  /// The members, two zero blocks and zero padding to a whole 10240-byte record (as tar writes).
  std::string finish() const;
  const std::vector<Entry>& entries() const noexcept { return entries_; }

  /// Writes bytes to a file; throws std::runtime_error on failure.
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
  std::vector<Entry> entries_;
};

}  // namespace ferry::testing
