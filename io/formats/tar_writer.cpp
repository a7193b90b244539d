#include "ferry/io/formats/tar_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "ferry/io/util/atomic_file.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

constexpr size_t kBlock = 512;
constexpr size_t kRecord = 10240;                        // tar's default blocking factor, 20 blocks
constexpr uint64_t kOctalSizeLimit = uint64_t{1} << 33;  // 11 octal digits hold sizes below 8 GiB

void put_octal(char* field, size_t width, uint64_t value) {
  // width - 1 zero-padded octal digits and a NUL, as GNU tar and Python's tarfile write them.
  std::snprintf(field, width, "%0*llo", static_cast<int>(width - 1), static_cast<unsigned long long>(value));
}

std::string pax_record(const std::string& key, const std::string& value) {
  // "<length> <key>=<value>\n", where <length> counts its own digits.
  const size_t body = 1 + key.size() + 1 + value.size() + 1;
  size_t length = body + 1;
  while (std::to_string(length).size() + body != length) length = std::to_string(length).size() + body;
  return std::to_string(length) + " " + key + "=" + value + "\n";
}

}  // namespace

void TarWriter::header(std::string_view name, std::string_view prefix, uint64_t size, char type) {
  char block[kBlock] = {};
  if (!name.empty()) std::memcpy(block, name.data(), std::min(name.size(), size_t{100}));
  put_octal(block + 100, 8, type == '5' ? 0755 : 0644);
  put_octal(block + 108, 8, 1000);
  put_octal(block + 116, 8, 1000);
  if (base256_ || size >= kOctalSizeLimit) {
    // GNU base-256: the top bit of the first byte set, the value big-endian in the field's last 8 bytes.
    block[124] = static_cast<char>(0x80);
    for (int i = 11; i >= 4; --i) block[124 + i] = static_cast<char>((size >> (8 * (11 - i))) & 0xff);
  } else {
    put_octal(block + 124, 12, size);
  }
  put_octal(block + 136, 12, 1700000000);  // a fixed mtime: the same members give the same bytes
  block[156] = type;
  if (long_names_ == TarLongNames::kGnu) {
    std::memcpy(block + 257, "ustar  ", 8);  // GNU magic and version: "ustar  \0"
  } else {
    std::memcpy(block + 257, "ustar", 6);
    std::memcpy(block + 263, "00", 2);
  }
  std::memcpy(block + 265, "ferry", 5);
  std::memcpy(block + 297, "ferry", 5);
  if (!prefix.empty()) std::memcpy(block + 345, prefix.data(), std::min(prefix.size(), size_t{155}));
  std::memset(block + 148, ' ', 8);
  unsigned sum = 0;
  for (char c : block) sum += static_cast<unsigned char>(c);
  std::snprintf(block + 148, 8, "%06o", sum);  // then NUL and the space already there
  out_.append(block, kBlock);
}

void TarWriter::data(std::string_view bytes) {
  out_ += bytes;
  out_.append((kBlock - bytes.size() % kBlock) % kBlock, '\0');
}

void TarWriter::pax(const std::vector<std::pair<std::string, std::string>>& records, char type) {
  std::string body;
  for (const auto& [key, value] : records) body += pax_record(key, value);
  header(type == 'g' ? "pax_global_header" : "PaxHeader/entry", "", body.size(), type);
  data(body);
}

void TarWriter::add_pax_global(const std::vector<std::pair<std::string, std::string>>& records) { pax(records, 'g'); }
void TarWriter::add_pax_local(const std::vector<std::pair<std::string, std::string>>& records) { pax(records, 'x'); }

const TarWriter::Entry& TarWriter::add(const std::string& name, std::string_view bytes, char type) {
  if (name.empty()) throw Error("tar writer: a member needs a name");
  Entry entry{name, offset(), 0, bytes.size()};
  std::string_view field = name;
  std::string_view prefix;
  if (name.size() > 100) {
    switch (long_names_) {
      case TarLongNames::kGnu: {
        const std::string link = name + '\0';
        header("././@LongLink", "", link.size(), 'L');
        data(link);
        field = std::string_view(name).substr(0, 100);
        break;
      }
      case TarLongNames::kPax:
        pax({{"path", name}}, 'x');
        field = std::string_view(name).substr(name.size() - 100);
        break;
      case TarLongNames::kUstarPrefix: {
        size_t slash = name.rfind('/', 155);
        if (slash != std::string::npos && name.size() - slash - 1 > 100) slash = std::string::npos;
        if (slash == std::string::npos || slash == 0) {
          throw Error("tar writer: cannot split the name " + name +
                      " into a ustar prefix (up to 155 bytes) and name (up to 100) at a '/'");
        }
        prefix = std::string_view(name).substr(0, slash);
        field = std::string_view(name).substr(slash + 1);
        break;
      }
    }
  }
  header(field, prefix, bytes.size(), type);
  entry.data_offset = offset();
  data(bytes);
  entries_.push_back(std::move(entry));
  return entries_.back();
}

std::string TarWriter::take() {
  taken_ += out_.size();
  std::string bytes;
  bytes.swap(out_);
  return bytes;
}

std::string TarWriter::finish() const {
  std::string out = out_;
  out.append(2 * kBlock, '\0');
  const uint64_t total = taken_ + out.size();
  out.append(static_cast<size_t>((kRecord - total % kRecord) % kRecord), '\0');
  return out;
}

void TarWriter::write_file(const std::string& path, std::string_view bytes) { AtomicFile::write_whole(path, bytes); }

}  // namespace ferry
