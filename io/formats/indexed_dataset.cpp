#include "ferry/io/formats/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include <torch/version.h>

#include "ferry/io/formats/indexed_dataset_format.h"
#include "ferry/io/util/dataset_paths.h"
#include "ferry/io/util/printable.h"
#include "ferry/io/util/regular_file.h"

namespace ferry {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the .idx and .bin are little-endian and read in place; a big-endian host would need swaps");

using namespace detail::mmidx;  // the layout's constants

std::string errno_text(int error) { return std::strerror(error); }

// Maps `path` read-only, whole; a 0-byte file gives no mapping. The descriptor is closed on return.
detail::MappedBytes map_file(const std::string& path, const std::string& prefix, size_t& bytes) {
  std::string why;  // a FIFO is refused, not waited on
  const int fd = detail::open_regular_file(path, why);
  if (fd < 0) {
    std::string hint;
    for (const char* suffix : {".idx", ".bin"}) {
      if (prefix.size() > 4 && prefix.compare(prefix.size() - 4, 4, suffix) == 0) {
        hint =
            " (the prefix '" + prefix + "' ends with " + suffix + "; give it without: <prefix>.idx and .bin are added)";
      }
    }
    throw Error("megatron dataset: cannot open " + path + ": " + why + hint);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw Error("megatron dataset: cannot stat " + path + ": " + errno_text(errno));
  if (!S_ISREG(info.st_mode)) throw Error("megatron dataset: " + path + " is not a regular file");
  bytes = static_cast<size_t>(info.st_size);
  if (bytes == 0) return detail::MappedBytes(nullptr, detail::Unmapper{0});
  void* data = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    throw Error("megatron dataset: cannot map " + path + " (" + std::to_string(bytes) +
                " bytes): " + errno_text(errno));
  }
  return detail::MappedBytes(static_cast<const std::byte*>(data), detail::Unmapper{bytes});
}

std::string printable(const std::byte* data, size_t bytes) {
  // Shown between double quotes, whole (a magic is a few bytes); a ' stays as it is.
  return ferry::printable(std::string_view(reinterpret_cast<const char*>(data), bytes), bytes, "");
}

}  // namespace

void detail::Unmapper::operator()(const std::byte* data) const noexcept {
  if (data != nullptr) ::munmap(const_cast<std::byte*>(data), bytes);
}

size_t indexed_dtype_size(IndexedDtype dtype) noexcept {
  switch (dtype) {
    case IndexedDtype::kUInt8:
    case IndexedDtype::kInt8: return 1;
    case IndexedDtype::kInt16:
    case IndexedDtype::kUInt16: return 2;
    case IndexedDtype::kInt32:
    case IndexedDtype::kFloat32: return 4;
    case IndexedDtype::kInt64:
    case IndexedDtype::kFloat64: return 8;
  }
  return 0;
}

std::string_view indexed_dtype_name(IndexedDtype dtype) noexcept {
  switch (dtype) {
    case IndexedDtype::kUInt8: return "uint8";
    case IndexedDtype::kInt8: return "int8";
    case IndexedDtype::kInt16: return "int16";
    case IndexedDtype::kInt32: return "int32";
    case IndexedDtype::kInt64: return "int64";
    case IndexedDtype::kFloat64: return "float64";
    case IndexedDtype::kFloat32: return "float32";
    case IndexedDtype::kUInt16: return "uint16";
  }
  return "unknown";
}

std::optional<at::ScalarType> indexed_dtype_scalar_type(IndexedDtype dtype) noexcept {
  switch (dtype) {
    case IndexedDtype::kUInt8: return at::kByte;
    case IndexedDtype::kInt8: return at::kChar;
    case IndexedDtype::kInt16: return at::kShort;
    case IndexedDtype::kInt32: return at::kInt;
    case IndexedDtype::kInt64: return at::kLong;
    case IndexedDtype::kFloat64: return at::kDouble;
    case IndexedDtype::kFloat32: return at::kFloat;
    case IndexedDtype::kUInt16:
      // at::kUInt16 arrived in libtorch 2.3 (as a "shell" type: storage, views and copies, few ops).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
      return at::kUInt16;
#else
      return std::nullopt;
#endif
  }
  return std::nullopt;
}

IndexedDataset::IndexedDataset(std::string prefix, const RemoteOptions& remote)
    : prefix_(std::move(prefix)), idx_path_(prefix_ + ".idx"), bin_path_(prefix_ + ".bin") {
  if (!detail::is_fetched_path(prefix_) || prefix_.starts_with("pipe:")) {
    idx_ = map_file(idx_path_, prefix_, idx_bytes_);
    bin_ = map_file(bin_path_, prefix_, bin_bytes_);
  } else {
    const std::shared_ptr<DataStore> store = DataStore::get(remote);
    const std::shared_ptr<const DataFile> idx = store->open(idx_path_, DataStore::Access::kWhole, "megatron index");
    idx_bytes_ = static_cast<size_t>(idx->size());
    if (idx_bytes_ > 0) {
      // Read into anonymous memory, which the Unmapper frees like a mapping.
      void* data = ::mmap(nullptr, idx_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (data == MAP_FAILED) throw Error("megatron dataset: no memory for " + idx_path_ + ": " + errno_text(errno));
      idx_ = detail::MappedBytes(static_cast<const std::byte*>(data), detail::Unmapper{idx_bytes_});
      idx->read(0, idx_bytes_, data);  // (MappedBytes is a unique_ptr: read_whole()'s shared one does not fit)
    }
    bin_file_ = store->open(bin_path_, DataStore::Access::kBlocks, "megatron tokens");
    bin_bytes_ = static_cast<size_t>(bin_file_->size());
  }
  validate();
}

IndexedDataset::~IndexedDataset() = default;

void IndexedDataset::fail(const std::string& path, uint64_t offset, const std::string& cause) const {
  throw Error("megatron dataset: " + path + " at byte offset " + std::to_string(offset) + ": " + cause);
}

template <typename T>
T IndexedDataset::idx_value(uint64_t offset) const noexcept {
  T value;
  std::memcpy(&value, idx_.get() + offset, sizeof(T));  // unaligned: see Note [MMIDIDX layout]
  return value;
}

void IndexedDataset::validate() {
  const std::byte* idx = idx_.get();
  const uint64_t size = idx_bytes_;

  // Magic first, on whatever bytes there are: a file of another format should say so, not "truncated".
  const size_t magic_seen = std::min<size_t>(size, kMagicBytes);
  if (magic_seen == 0 || std::memcmp(idx, kMagic, magic_seen) != 0) {
    std::string hint;
    if (size >= 6 && std::memcmp(idx, "TNTIDX", 6) == 0) {
      hint =
          "; this is the older fairseq/Megatron 'lazy'/'cached' index, which ferry does not read (convert it "
          "to the mmap format)";
    }
    fail(idx_path_, 0,
         "bad magic: expected \"MMIDIDX\\x00\\x00\" (a Megatron-LM indexed dataset index), found \"" +
             printable(idx, magic_seen) + "\"" + hint);
  }
  if (size < kHeaderBytes) {
    fail(idx_path_, size,
         "index truncated: its header needs " + std::to_string(kHeaderBytes) + " bytes, the file has " +
             std::to_string(size));
  }
  const auto version = idx_value<uint64_t>(kVersionOffset);
  if (version != kVersion) {
    fail(idx_path_, kVersionOffset,
         "unsupported version " + std::to_string(version) + " (expected " + std::to_string(kVersion) + ")");
  }
  const auto code = idx_value<uint8_t>(kDtypeOffset);
  if (code < 1 || code > 8) {
    fail(idx_path_, kDtypeOffset,
         "unknown dtype code " + std::to_string(code) +
             " (Megatron's codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)");
  }
  dtype_ = static_cast<IndexedDtype>(code);
  itemsize_ = indexed_dtype_size(dtype_);

  const auto sequences = idx_value<uint64_t>(kSequenceCountOffset);
  const auto documents = idx_value<uint64_t>(kDocumentCountOffset);
  if (documents == 0) {
    fail(idx_path_, kDocumentCountOffset,
         "document index count is 0; Megatron always stores at least one (the leading 0)");
  }
  // The arrays' size, overflow-checked: the counts are untrusted 64-bit numbers.
  uint64_t arrays = 0;
  uint64_t document_bytes = 0;
  const bool overflow = __builtin_mul_overflow(sequences, uint64_t{12}, &arrays) ||
                        __builtin_mul_overflow(documents, uint64_t{8}, &document_bytes) ||
                        __builtin_add_overflow(arrays, document_bytes, &arrays) ||
                        __builtin_add_overflow(arrays, uint64_t{kHeaderBytes}, &arrays);
  if (overflow || arrays > size) {
    fail(idx_path_, size,
         "index truncated or counts corrupt: the header says " + std::to_string(sequences) +
             " sequences (byte 18) and " + std::to_string(documents) + " document indices (byte 26), which need " +
             (overflow ? std::string("more than 2^64") : std::to_string(arrays)) +
             " bytes, but the file ends at byte " + std::to_string(size));
  }
  sequence_count_ = sequences;
  document_indices_ = documents;
  const uint64_t rest = size - arrays;
  if (rest == sequences && sequences > 0) {
    has_modes_ = true;
  } else if (rest != 0) {
    fail(idx_path_, arrays,
         std::to_string(rest) + " trailing bytes after the document indices (an index ends there, or " +
             std::to_string(sequences) + " bytes later when it carries one mode byte per sequence)");
  }

  // Sequences: lengths not negative, pointers back to back from 0, inside the .bin.
  uint64_t end = 0;  // where the next sequence must start, in .bin bytes
  for (uint64_t i = 0; i < sequences; ++i) {
    const uint64_t length_at = lengths_offset() + 4 * i;
    const uint64_t pointer_at = pointers_offset() + 8 * i;
    const auto length = idx_value<int32_t>(length_at);
    const auto pointer = idx_value<int64_t>(pointer_at);
    if (length < 0)
      fail(idx_path_, length_at, "sequence " + std::to_string(i) + " has negative length " + std::to_string(length));
    if (pointer < 0 || static_cast<uint64_t>(pointer) != end) {
      const std::string which = "sequence " + std::to_string(i) + "'s pointer is " + std::to_string(pointer);
      if (i > 0 && pointer < idx_value<int64_t>(pointer_at - 8)) {
        fail(idx_path_, pointer_at,
             which + ", below sequence " + std::to_string(i - 1) + "'s " +
                 std::to_string(idx_value<int64_t>(pointer_at - 8)) + ": pointers must increase");
      }
      fail(idx_path_, pointer_at,
           which + ", but " +
               (i == 0 ? std::string("the first sequence starts at byte 0")
                       : "sequence " + std::to_string(i - 1) + " ends at byte " + std::to_string(end)) +
               ": Megatron's writer packs sequences back to back");
    }
    end += static_cast<uint64_t>(length) * itemsize_;  // no overflow: end <= bin size, checked below
    if (end > bin_bytes_) {
      fail(bin_path_, bin_bytes_,
           "the .bin ends here, but sequence " + std::to_string(i) + " of " + idx_path_ + " (length at byte " +
               std::to_string(length_at) + ", pointer at byte " + std::to_string(pointer_at) + ") runs to byte " +
               std::to_string(end) + ": the .bin is truncated or belongs to another index");
    }
  }
  if (end != bin_bytes_) {
    fail(bin_path_, end,
         "the last sequence of " + idx_path_ + " ends here, but the .bin goes on for " +
             std::to_string(bin_bytes_ - end) + " more bytes: trailing bytes, or the .bin belongs to another index");
  }
  total_tokens_ = end / itemsize_;

  // Document indices: 0, not decreasing, ending at the sequence count.
  uint64_t previous = 0;
  for (uint64_t j = 0; j < documents; ++j) {
    const uint64_t at = document_indices_offset() + 8 * j;
    const auto value = idx_value<int64_t>(at);
    const std::string which = "document index " + std::to_string(j) + " is " + std::to_string(value);
    if (j == 0 && value != 0) fail(idx_path_, at, which + "; the first must be 0");
    if (value < 0 || static_cast<uint64_t>(value) < previous) {
      fail(idx_path_, at, which + ", below the one before (" + std::to_string(previous) + "): they must not decrease");
    }
    if (static_cast<uint64_t>(value) > sequences) {
      fail(idx_path_, at, which + ", past the sequence count " + std::to_string(sequences));
    }
    previous = static_cast<uint64_t>(value);
  }
  if (previous != sequences) {
    fail(idx_path_, document_indices_offset() + 8 * (documents - 1),
         "the last document index is " + std::to_string(previous) + ", but it must be the sequence count " +
             std::to_string(sequences) + " (every sequence belongs to a document)");
  }
}

void IndexedDataset::check_sequence(uint64_t i, const char* what) const {
  if (i >= sequence_count_) {
    throw Error("megatron dataset " + prefix_ + ": " + what + "(" + std::to_string(i) + ") is beyond its " +
                std::to_string(sequence_count_) + " sequences");
  }
}

int64_t IndexedDataset::sequence_length(uint64_t i) const {
  check_sequence(i, "sequence_length");
  return idx_value<int32_t>(lengths_offset() + 4 * i);
}

uint64_t IndexedDataset::sequence_pointer(uint64_t i) const {
  check_sequence(i, "sequence_pointer");
  return static_cast<uint64_t>(idx_value<int64_t>(pointers_offset() + 8 * i));
}

std::span<const std::byte> IndexedDataset::sequence_bytes(uint64_t i) const {
  check_sequence(i, "sequence_bytes");
  const auto length = static_cast<uint64_t>(idx_value<int32_t>(lengths_offset() + 4 * i));
  const auto pointer = static_cast<uint64_t>(idx_value<int64_t>(pointers_offset() + 8 * i));
  if (!mapped()) throw Error("megatron dataset " + prefix_ + ": sequence_bytes() of a remote .bin (read_tokens())");
  return {bin_.get() + pointer, length * itemsize_};
}

std::span<const std::byte> IndexedDataset::token_bytes(uint64_t first, uint64_t count) const {
  if (first > total_tokens_ || count > total_tokens_ - first) {
    throw Error("megatron dataset " + prefix_ + ": tokens [" + std::to_string(first) + ", " + std::to_string(first) +
                " + " + std::to_string(count) + ") run past its " + std::to_string(total_tokens_) + " tokens");
  }
  if (!mapped()) throw Error("megatron dataset " + prefix_ + ": token_bytes() of a remote .bin (read_tokens())");
  return {bin_.get() + first * itemsize_, count * itemsize_};
}

void IndexedDataset::read_tokens(uint64_t first, uint64_t count, void* out, const std::atomic<bool>* stop) const {
  if (first > total_tokens_ || count > total_tokens_ - first) {
    throw Error("megatron dataset " + prefix_ + ": tokens [" + std::to_string(first) + ", " + std::to_string(first) +
                " + " + std::to_string(count) + ") run past its " + std::to_string(total_tokens_) + " tokens");
  }
  if (count == 0) return;
  if (mapped()) {
    std::memcpy(out, bin_.get() + first * itemsize_, count * itemsize_);
  } else {
    bin_file_->read(first * itemsize_, count * itemsize_, out, stop);
  }
}

uint64_t IndexedDataset::document_index(uint64_t j) const {
  if (j >= document_indices_) {
    throw Error("megatron dataset " + prefix_ + ": document_index(" + std::to_string(j) + ") is beyond its " +
                std::to_string(document_indices_) + " document indices");
  }
  return static_cast<uint64_t>(idx_value<int64_t>(document_indices_offset() + 8 * j));
}

std::pair<uint64_t, uint64_t> IndexedDataset::document_sequences(uint64_t d) const {
  if (d >= document_count()) {
    throw Error("megatron dataset " + prefix_ + ": document " + std::to_string(d) + " is beyond its " +
                std::to_string(document_count()) + " documents");
  }
  return {document_index(d), document_index(d + 1)};
}

std::pair<uint64_t, uint64_t> IndexedDataset::document_tokens(uint64_t d) const {
  const auto [first, last] = document_sequences(d);
  const auto start = [&](uint64_t sequence) {
    return sequence == sequence_count_ ? total_tokens_ : sequence_pointer(sequence) / itemsize_;
  };
  return {start(first), start(last)};
}

int8_t IndexedDataset::sequence_mode(uint64_t i) const {
  if (!has_modes_) throw Error("megatron dataset " + prefix_ + ": its index has no sequence modes");
  check_sequence(i, "sequence_mode");
  return idx_value<int8_t>(modes_offset() + i);
}

}  // namespace ferry
