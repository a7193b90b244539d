#include "ferry/io/formats/tar_index.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "ferry/io/remote/data_store.h"
#include "ferry/io/util/printable.h"
#include "ferry/pipeline/error.h"

namespace ferry {

// Note [Tar scanning]
//
// A tar file is a sequence of 512-byte blocks: a header block, then the member's data rounded up to
// whole blocks, then the next header; two zero blocks end the archive. TarIndex reads each header
// with one pread and computes where the next one is from the size field, so it never reads member
// data — a shard of large images is indexed in a few milliseconds per thousand members.
//
// Headers come in three dialects, all handled:
//   - ustar (POSIX.1-1988): a name longer than 100 bytes is split into `prefix` (at offset 345) and
//     `name`; used only when the magic is exactly "ustar\0" (GNU's "ustar  \0" keeps other fields
//     there).
//   - GNU: a member of type 'L' (name "././@LongLink") whose data is the next member's name; 'K'
//     likewise for a link target (ignored). Sizes of 8 GiB and more are base-256 (high bit set).
//   - pax (POSIX.1-2001): a member of type 'x' whose data is "<length> <key>=<value>\n" records for
//     the next member, or 'g' for every later member; `path` replaces the name and `size` the size
//     field. An empty value removes the key (a local record cancels a global one).
// Extended-header state belongs to the next real member and is cleared after it; an extended header
// followed by the end of the archive is an error, as is one larger than kMaxExtendedHeader (a
// corrupt size must not become a huge allocation).
//
// Regular files are types '0', '\0' (old tar) and '7' (contiguous). Directories, links, devices and
// FIFOs carry no data and are skipped, as WebDataset skips every non-regular member; unknown types
// are skipped over their size; sparse ('S', GNU.sparse.* pax keys) and multi-volume ('M') members
// are refused, since their data is not their content.
//
// Validation, each failure a ferry::Error naming the file, the member (when its header is sound) and
// the byte offset: the checksum (unsigned or, as some old writers computed it, signed byte sum),
// octal or base-256 numeric fields, each member's data lying within the file, a header cut by the
// end of the file, and an archive that stops without its end-of-archive marker (a file cut exactly
// between members). After the marker nothing is read: padding to a record size is normal.
//
// WebDataset grouping: a member name's last path component splits at its first '.' into basename
// and extension ("a/b/000123.seg.png" -> key "a/b/000123", extension "seg.png", lower-cased); the
// consecutive members sharing a key make one sample. Members without an extension, whose last
// component starts with '.', or named "__*__" at top level (metadata) are skipped, as WebDataset does.
// A key that reappears after another key, or an extension repeated within a sample, is an error
// naming both offsets: a reader streaming the shard would otherwise split or merge samples silently.

namespace {

constexpr uint64_t kBlock = 512;
constexpr uint64_t kMaxExtendedHeader = uint64_t{1} << 20;

// Header field offsets and widths (POSIX ustar).
constexpr size_t kNameOffset = 0, kNameSize = 100;
constexpr size_t kSizeOffset = 124, kSizeSize = 12;
constexpr size_t kChecksumOffset = 148, kChecksumSize = 8;
constexpr size_t kTypeOffset = 156;
constexpr size_t kLinkOffset = 157, kLinkSize = 100;
constexpr size_t kMagicOffset = 257;
constexpr size_t kPrefixOffset = 345, kPrefixSize = 155;

using Block = std::array<unsigned char, kBlock>;

// Text from a file, safe to put in a message: control and non-ASCII bytes escaped, long text cut.
std::string printable(std::string_view text) { return ferry::printable(text, 200); }

// A NUL-terminated string in a fixed-width field (no terminator when it fills the field).
std::string_view field_text(const Block& block, size_t offset, size_t width) {
  const auto* begin = reinterpret_cast<const char*>(block.data() + offset);
  return {begin, strnlen(begin, width)};
}

// A numeric header field: octal digits after optional spaces, ended by a space or NUL (then only
// spaces and NULs), an empty field meaning 0; or GNU base-256 (first byte 0x80, big-endian rest).
std::optional<uint64_t> parse_number(const Block& block, size_t offset, size_t width) {
  const unsigned char* field = block.data() + offset;
  if (field[0] & 0x80) {
    if (field[0] != 0x80) return std::nullopt;  // 0xff: negative
    uint64_t value = 0;
    for (size_t i = 1; i < width; ++i) {
      if (value > (UINT64_MAX >> 9)) return std::nullopt;  // keep the result below 2^63
      value = (value << 8) | field[i];
    }
    return value;
  }
  size_t i = 0;
  while (i < width && field[i] == ' ') ++i;
  uint64_t value = 0;
  for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (value > (UINT64_MAX >> 4)) return std::nullopt;
    value = value * 8 + (field[i] - '0');
  }
  for (; i < width; ++i) {
    if (field[i] != ' ' && field[i] != '\0') return std::nullopt;
  }
  return value;
}

std::optional<uint64_t> parse_decimal(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Reads up to `size` bytes at `offset` of `file` (`file_size` bytes); fewer only at its end. Throws
// ferry::Error naming the shard on a failed read.
size_t read_up_to(const DataFile& file, uint64_t file_size, void* out, size_t size, uint64_t offset) {
  const size_t take = offset >= file_size ? 0 : static_cast<size_t>(std::min<uint64_t>(size, file_size - offset));
  if (take > 0) file.read(offset, take, out);
  return take;
}

// pax extended-header keys, local ('x', for the next member) over global ('g').
class PaxState {
 public:
  void parse(std::string_view data, bool global, const std::string& where) {
    size_t pos = 0;
    while (pos < data.size()) {
      if (data[pos] == '\0') break;  // padding after the last record
      const size_t space = data.find(' ', pos);
      const auto length = space == std::string_view::npos ? std::nullopt : parse_decimal(data.substr(pos, space - pos));
      if (!length || *length < 5 || *length > data.size() - pos || data[pos + *length - 1] != '\n') {
        throw Error(where + "malformed pax record at byte " + std::to_string(pos) +
                    " of the extended header (each is \"<length> <key>=<value>\\n\")");
      }
      const std::string_view record = data.substr(space + 1, pos + *length - 1 - (space + 1));
      const size_t equals = record.find('=');
      if (equals == std::string_view::npos || equals == 0) {
        throw Error(where + "pax record '" + printable(record) + "' has no key=value");
      }
      std::string key(record.substr(0, equals));
      std::string value(record.substr(equals + 1));
      if (global) {
        if (value.empty()) {
          global_.erase(key);
        } else {
          global_[std::move(key)] = std::move(value);
        }
      } else {
        local_[std::move(key)] = std::move(value);
      }
      pos += *length;
    }
  }

  // The value in force for the next member; nullopt when unset or removed by an empty value.
  std::optional<std::string> get(const std::string& key) const {
    if (const auto it = local_.find(key); it != local_.end()) {
      return it->second.empty() ? std::nullopt : std::optional(it->second);
    }
    if (const auto it = global_.find(key); it != global_.end()) return it->second;
    return std::nullopt;
  }

  bool any_prefixed(std::string_view prefix) const {
    auto has = [&](const auto& map) {
      const auto it = map.lower_bound(std::string(prefix));
      return it != map.end() && it->first.starts_with(prefix);
    };
    return has(local_) || has(global_);
  }

  void end_member() { local_.clear(); }

 private:
  std::map<std::string, std::string> local_;
  std::map<std::string, std::string> global_;
};

}  // namespace

TarIndex::TarIndex(std::string path)
    : TarIndex(DataStore::get(RemoteOptions{})->open(path, DataStore::Access::kWhole, "tar shard")) {}

TarIndex::TarIndex(std::shared_ptr<const DataFile> file) : path_(file->name()), file_(std::move(file)) {
  file_size_ = file_->size();
  scan();
}

std::string_view TarIndex::key(size_t sample) const {
  if (sample >= sample_count()) {
    throw Error("tar shard '" + path_ + "': sample " + std::to_string(sample) + " is beyond its " +
                std::to_string(sample_count()) + " samples");
  }
  return std::string_view(keys_).substr(key_begin_[sample], key_begin_[sample + 1] - key_begin_[sample]);
}

std::span<const TarMember> TarIndex::members(size_t sample) const {
  if (sample >= sample_count()) {
    throw Error("tar shard '" + path_ + "': sample " + std::to_string(sample) + " is beyond its " +
                std::to_string(sample_count()) + " samples");
  }
  return std::span<const TarMember>(members_).subspan(member_begin_[sample],
                                                      member_begin_[sample + 1] - member_begin_[sample]);
}

std::optional<uint32_t> TarIndex::extension_id(std::string_view extension) const {
  const std::string wanted = lower(extension);
  for (size_t i = 0; i < extensions_.size(); ++i) {
    if (extensions_[i] == wanted) return static_cast<uint32_t>(i);
  }
  return std::nullopt;
}

const TarMember* TarIndex::find(size_t sample, uint32_t extension) const {
  for (const TarMember& member : members(sample)) {
    if (member.extension == extension) return &member;
  }
  return nullptr;
}

std::optional<std::string> TarIndex::link_named(std::string_view name) const {
  const auto found = links_.find(name);
  if (found == links_.end()) return std::nullopt;
  return found->second;
}

void TarIndex::read(const TarMember& member, void* out, const std::atomic<bool>* stop) const {
  try {
    file_->read(member.data_offset, member.size, out, stop);
  } catch (const std::exception& e) {
    throw Error("tar shard '" + path_ + "': member with header at byte " + std::to_string(member.header_offset) + " (" +
                std::to_string(member.size) + " bytes at byte " + std::to_string(member.data_offset) +
                "): " + cause_of(e));
  }
}

uint32_t TarIndex::intern(std::string_view extension) {
  for (size_t i = 0; i < extensions_.size(); ++i) {
    if (extensions_[i] == extension) return static_cast<uint32_t>(i);
  }
  extensions_.emplace_back(extension);
  return static_cast<uint32_t>(extensions_.size() - 1);
}

void TarIndex::scan() {
  const std::string where = "tar shard '" + path_ + "': ";
  PaxState pax;
  std::optional<std::string> long_name;  // from a GNU 'L' member, for the next member
  constexpr uint64_t kNone = UINT64_MAX;
  uint64_t extended_header = kNone;                // offset of the first extended header of the next member
  std::unordered_map<std::string, uint64_t> seen;  // key -> header offset of its sample's first member
  uint64_t offset = 0;
  Block block;

  auto extended_data = [&](uint64_t size, uint64_t data_offset, const std::string& what) {
    if (size > kMaxExtendedHeader) {
      throw Error(where + what + " at byte " + std::to_string(data_offset - kBlock) + " claims " +
                  std::to_string(size) + " bytes, more than the " + std::to_string(kMaxExtendedHeader) + " accepted");
    }
    std::string data(size, '\0');
    if (read_up_to(*file_, file_size_, data.data(), size, data_offset) !=
        size) {  // within the file, as the caller checked
      throw Error(where + "the file shrank while the " + what + " at byte " + std::to_string(data_offset - kBlock) +
                  " was read");
    }
    return data;
  };

  if (file_size_ == 0) throw Error(where + "the file is empty, not a tar archive");
  for (;;) {
    if (offset >= file_size_) {
      throw Error(where + "the archive stops at byte " + std::to_string(file_size_) +
                  " without an end-of-archive marker (a zero block): the file is truncated");
    }
    if (file_size_ - offset < kBlock) {
      throw Error(where + "truncated header at byte " + std::to_string(offset) + ": only " +
                  std::to_string(file_size_ - offset) + " of its 512 bytes are in the file");
    }
    if (read_up_to(*file_, file_size_, block.data(), kBlock, offset) != kBlock) {
      throw Error(where + "the file shrank while its header at byte " + std::to_string(offset) + " was read");
    }
    if (std::all_of(block.begin(), block.end(), [](unsigned char c) { return c == 0; })) {
      if (extended_header != kNone) {
        throw Error(where + "the extended header at byte " + std::to_string(extended_header) +
                    " is followed by the end of the archive, not by a member");
      }
      // Two zero blocks end the archive (record padding after them is not read). One at the very end
      // of the file is accepted, as GNU tar does; one followed by more data is damage — a header
      // zeroed in place — and stopping there would drop every later member without a word.
      const uint64_t next = offset + kBlock;
      if (next < file_size_) {
        const uint64_t length = std::min<uint64_t>(kBlock, file_size_ - next);
        if (read_up_to(*file_, file_size_, block.data(), length, next) != length) {
          throw Error(where + "the file shrank while the block at byte " + std::to_string(next) + " was read");
        }
        if (!std::all_of(block.begin(), block.begin() + static_cast<std::ptrdiff_t>(length),
                         [](unsigned char c) { return c == 0; })) {
          throw Error(where + "a lone zero block at byte " + std::to_string(offset) +
                      " is followed by more data at byte " + std::to_string(next) +
                      ": a damaged header (only two zero blocks end an archive), " + std::to_string(file_size_ - next) +
                      " bytes after it would be lost");
        }
      }
      break;
    }

    const auto stored = parse_number(block, kChecksumOffset, kChecksumSize);
    uint64_t unsigned_sum = 0;
    int64_t signed_sum = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      const unsigned char c = (i >= kChecksumOffset && i < kChecksumOffset + kChecksumSize) ? ' ' : block[i];
      unsigned_sum += c;
      signed_sum += static_cast<signed char>(c);
    }
    if (!stored || (*stored != unsigned_sum && static_cast<int64_t>(*stored) != signed_sum)) {
      throw Error(where + "bad header checksum at byte " + std::to_string(offset) + " (name field '" +
                  printable(field_text(block, kNameOffset, kNameSize)) + "'): stored " +
                  (stored ? std::to_string(*stored)
                          : "'" + printable(field_text(block, kChecksumOffset, kChecksumSize)) + "'") +
                  ", computed " + std::to_string(unsigned_sum) + "; this is not a tar file or it is corrupt");
    }

    std::string name(field_text(block, kNameOffset, kNameSize));
    if (std::memcmp(block.data() + kMagicOffset, "ustar\0", 6) == 0) {
      const std::string_view prefix = field_text(block, kPrefixOffset, kPrefixSize);
      if (!prefix.empty()) name = std::string(prefix) + "/" + name;
    }
    const char type = static_cast<char>(block[kTypeOffset]);
    const bool regular = type == '0' || type == '\0' || type == '7';
    const bool extension_header = type == 'L' || type == 'K' || type == 'x' || type == 'g';
    if (regular) {
      if (auto path = pax.get("path"))
        name = std::move(*path);
      else if (long_name)
        name = *long_name;
    }
    const std::string member =
        where + "member '" + printable(name) + "' (header at byte " + std::to_string(offset) + ")";

    auto size = parse_number(block, kSizeOffset, kSizeSize);
    if (!size) {
      throw Error(member + ": bad size field '" + printable(field_text(block, kSizeOffset, kSizeSize)) +
                  "' (octal digits or base-256 expected)");
    }
    if (regular) {
      if (const auto text = pax.get("size")) {
        size = parse_decimal(*text);
        if (!size) throw Error(member + ": bad pax size '" + printable(*text) + "'");
      }
    }
    const uint64_t data_offset = offset + kBlock;
    // Links, directories, devices and FIFOs have no data whatever their size field says (as tarfile).
    const bool has_data = !(type >= '1' && type <= '6');
    if (has_data && *size > file_size_ - data_offset) {
      throw Error(member + ": its " + std::to_string(*size) + " data bytes from byte " + std::to_string(data_offset) +
                  " run past the end of the file at byte " + std::to_string(file_size_) + ": the archive is truncated");
    }
    const uint64_t next = has_data ? data_offset + (*size + kBlock - 1) / kBlock * kBlock : data_offset;

    if (extension_header) {
      const std::string what = type == 'L' ? "GNU long name" : type == 'K' ? "GNU long link name" : "pax header";
      if (type != 'g' && extended_header == kNone) extended_header = offset;
      if (type == 'L') {
        const std::string data = extended_data(*size, data_offset, what);
        long_name = data.substr(0, data.find('\0'));
      } else if (type == 'x' || type == 'g') {
        pax.parse(extended_data(*size, data_offset, what), type == 'g', member + ": ");
      }
      offset = next;
      continue;
    }
    if (type == 'S' || type == 'M' || (regular && pax.any_prefixed("GNU.sparse."))) {
      throw Error(member + ": sparse and multi-volume members are not supported");
    }
    if (type == '1' || type == '2') {  // a link: no data, but a message about a missing member names it
      const std::string target = pax.get("linkpath").value_or(std::string(field_text(block, kLinkOffset, kLinkSize)));
      links_[name] = std::string(type == '1' ? "a hard link" : "a symbolic link") + " to '" + printable(target) + "'";
    }
    const uint64_t header_offset = extended_header != kNone ? extended_header : offset;
    long_name.reset();
    extended_header = kNone;
    pax.end_member();
    offset = next;
    if (!regular) continue;

    // WebDataset: key and extension split at the first '.' of the last path component.
    const size_t slash = name.rfind('/');
    const size_t base = slash == std::string::npos ? 0 : slash + 1;
    const size_t dot = name.find('.', base);
    if (dot == std::string::npos || dot == base || dot + 1 == name.size()) continue;             // no key or extension
    if (slash == std::string::npos && name.starts_with("__") && name.ends_with("__")) continue;  // metadata
    const std::string_view sample_key = std::string_view(name).substr(0, dot);
    const uint32_t extension = intern(lower(std::string_view(name).substr(dot + 1)));
    const TarMember entry{header_offset, data_offset, *size, extension};

    const bool same_sample = sample_count() > 0 && key(sample_count() - 1) == sample_key;
    if (same_sample) {
      if (const TarMember* earlier = find(sample_count() - 1, extension)) {
        throw Error(member + ": sample '" + printable(sample_key) + "' already has a '" + extensions_[extension] +
                    "' member (header at byte " + std::to_string(earlier->header_offset) + ")");
      }
      members_.push_back(entry);
      member_begin_.back() = members_.size();
      continue;
    }
    const auto [first, inserted] = seen.emplace(sample_key, header_offset);
    if (!inserted) {
      throw Error(member + ": sample key '" + printable(sample_key) +
                  "' appears again after other samples; its members from byte " + std::to_string(first->second) +
                  " and this one at byte " + std::to_string(header_offset) +
                  " are not adjacent (WebDataset needs a sample's members to be consecutive)");
    }
    members_.push_back(entry);
    member_begin_.push_back(members_.size());
    keys_ += sample_key;
    key_begin_.push_back(keys_.size());
  }
}

// Note [kept indexes]
//
// Indexing a shard reads all of it; for a fetched shard (remote, compressed, piped) that is a whole
// download. Its index is therefore kept in the cache folder (index/<key>), and a later run, or
// another rank, starts from it without fetching anything: a resumed run fetches only the shards it still
// reads. The index records the object's size and ETag when it was indexed; every later fetch checks
// them, so a shard that changed since is an error rather than samples read at stale offsets, and that
// index is dropped for the next run to make anew.
namespace {

constexpr std::string_view kIndexMagic = "ferry-tar-index-1\n";

template <typename T>
void put(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}
void put_text(std::string& out, std::string_view text) {
  put<uint64_t>(out, text.size());
  out.append(text);
}
template <typename T>
void put_vector(std::string& out, const std::vector<T>& values) {
  put<uint64_t>(out, values.size());
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Reads what put*() wrote; any shortfall makes it fail.
struct Reader {
  std::string_view in;
  bool ok = true;
  template <typename T>
  T get() {
    T value{};
    if (in.size() < sizeof value) {
      ok = false;
      return value;
    }
    std::memcpy(&value, in.data(), sizeof value);
    in.remove_prefix(sizeof value);
    return value;
  }
  std::string text() {
    const auto size = get<uint64_t>();
    if (!ok || in.size() < size) {
      ok = false;
      return "";
    }
    std::string value(in.substr(0, size));
    in.remove_prefix(size);
    return value;
  }
  template <typename T>
  std::vector<T> vector() {
    const auto size = get<uint64_t>();
    if (!ok || size > in.size() / sizeof(T)) {
      ok = false;
      return {};
    }
    std::vector<T> values(size);
    std::memcpy(values.data(), in.data(), size * sizeof(T));
    in.remove_prefix(size * sizeof(T));
    return values;
  }
};

}  // namespace

std::string TarIndex::serialize() const {
  std::string out(kIndexMagic);
  put<uint64_t>(out, file_size_);
  put<uint64_t>(out, extensions_.size());
  for (const std::string& extension : extensions_) put_text(out, extension);
  put_vector(out, members_);
  put_vector(out, member_begin_);
  put_text(out, keys_);
  put_vector(out, key_begin_);
  put<uint64_t>(out, links_.size());
  for (const auto& [name, what] : links_) {
    put_text(out, name);
    put_text(out, what);
  }
  return out;
}

std::optional<TarIndex> TarIndex::deserialize(std::shared_ptr<const DataFile> file, std::string_view bytes) {
  if (!bytes.starts_with(kIndexMagic)) return std::nullopt;
  Reader in{bytes.substr(kIndexMagic.size())};
  TarIndex index;
  index.path_ = file->name();
  index.file_ = std::move(file);
  index.file_size_ = in.get<uint64_t>();
  const auto extensions = in.get<uint64_t>();
  for (uint64_t e = 0; in.ok && e < extensions && e < (uint64_t{1} << 20); ++e) index.extensions_.push_back(in.text());
  index.members_ = in.vector<TarMember>();
  index.member_begin_ = in.vector<size_t>();
  index.keys_ = in.text();
  index.key_begin_ = in.vector<size_t>();
  const auto links = in.get<uint64_t>();
  for (uint64_t l = 0; in.ok && l < links; ++l) {
    std::string name = in.text();
    index.links_[std::move(name)] = in.text();
  }
  // Whole and consistent, or not used: every offset it holds must lie where it says.
  bool sound = in.ok && in.in.empty() && index.extensions_.size() == extensions && !index.member_begin_.empty() &&
               index.member_begin_.size() == index.key_begin_.size() && index.member_begin_.front() == 0 &&
               index.member_begin_.back() == index.members_.size() && index.key_begin_.front() == 0 &&
               index.key_begin_.back() == index.keys_.size();
  for (size_t s = 1; sound && s < index.member_begin_.size(); ++s) {
    sound = index.member_begin_[s - 1] < index.member_begin_[s] && index.key_begin_[s - 1] <= index.key_begin_[s];
  }
  for (const TarMember& member : index.members_) {
    sound = sound && member.extension < index.extensions_.size() && member.data_offset <= index.file_size_ &&
            member.size <= index.file_size_ - member.data_offset;
  }
  if (!sound) return std::nullopt;
  return index;
}

}  // namespace ferry
