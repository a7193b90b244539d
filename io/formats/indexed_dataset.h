#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <c10/core/ScalarType.h>

#include "ferry/io/remote/data_store.h"
#include "ferry/io/util/remote_options.h"
#include "ferry/pipeline/error.h"

namespace ferry {

/// The element types of a Megatron indexed dataset, numbered as Megatron numbers them in byte 17 of
/// the .idx (class DType in megatron/core/datasets/indexed_dataset.py).
enum class IndexedDtype : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUInt16 = 8,
};

/// Bytes per element: 1, 2, 4 or 8.
size_t indexed_dtype_size(IndexedDtype dtype) noexcept;
/// numpy's name, as Megatron writes it: "uint16", "int32", "float64", ...
std::string_view indexed_dtype_name(IndexedDtype dtype) noexcept;
/// The libtorch type with the same bytes, or nullopt where this libtorch has none: uint16 before
/// libtorch 2.3 (at::kUInt16 does not exist there).
std::optional<at::ScalarType> indexed_dtype_scalar_type(IndexedDtype dtype) noexcept;
/// The dtype whose elements are T (uint16_t -> kUInt16, float -> kFloat32, ...).
template <typename T>
constexpr IndexedDtype indexed_dtype_of() noexcept;

namespace detail {
/// munmap()s a read-only mapping of `bytes` bytes; what IndexedDataset's mappings are held by.
struct Unmapper {
  size_t bytes = 0;
  void operator()(const std::byte* data) const noexcept;
};
using MappedBytes = std::unique_ptr<const std::byte, Unmapper>;
}  // namespace detail

/// A Megatron-LM indexed dataset ("MMIDIDX": `<prefix>.idx` + `<prefix>.bin`), opened read-only.
///
/// In: a path prefix. Owns: a read-only memory mapping of each file (the file descriptors are closed
/// once mapped; the mappings are unmapped by the destructor). Nothing is copied: lengths, pointers
/// and document indices are read from the mapped .idx, tokens are handed out as spans of the mapped
/// .bin. Out: the dataset's sequences and documents, see the accessors.
///
/// Everything is validated in the constructor (see Note [MMIDIDX layout]), so the accessors need no
/// checks beyond index bounds. Construct on any thread; after that every method is const, lock-free
/// and safe to call from any number of threads at once. Neither copyable nor movable: spans into it
/// stay valid for its lifetime. The files must not be truncated while open (a read past a file's new
/// end would raise SIGBUS); replacing them (write a new file, rename over) is safe.
class IndexedDataset {
 public:
  /// The header: magic (9), version (8), dtype code (1), sequence count (8), document count (8).
  static constexpr size_t kHeaderBytes = 34;

  /// Opens, maps and validates `<prefix>.idx` and `<prefix>.bin`. Blocks on I/O: it reads every
  /// length and pointer of the index once (O(sequences)), and no token. Throws ferry::Error naming
  /// the file and the byte offset for a missing file or any inconsistency. An http://, https:// or
  /// s3:// prefix is fetched through the DataStore of `remote`: the .idx whole, into memory; the .bin
  /// in blocks as its tokens are read (read_tokens(); it is not mapped).
  explicit IndexedDataset(std::string prefix, const RemoteOptions& remote = {});
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const noexcept { return prefix_; }
  const std::string& idx_path() const noexcept { return idx_path_; }
  const std::string& bin_path() const noexcept { return bin_path_; }

  IndexedDtype dtype() const noexcept { return dtype_; }
  /// Bytes per token.
  size_t itemsize() const noexcept { return itemsize_; }
  /// See indexed_dtype_scalar_type(): nullopt for uint16 on a libtorch without at::kUInt16.
  std::optional<at::ScalarType> scalar_type() const noexcept { return indexed_dtype_scalar_type(dtype_); }

  uint64_t sequence_count() const noexcept { return sequence_count_; }
  /// Tokens in sequence i. Throws ferry::Error for i >= sequence_count().
  int64_t sequence_length(uint64_t i) const;
  /// Byte offset of sequence i in the .bin. Sequences lie back to back, so this is also the first
  /// token's position in the concatenated stream times itemsize(). Throws for i >= sequence_count().
  uint64_t sequence_pointer(uint64_t i) const;
  /// Sequence i's tokens as mapped bytes (sequence_length(i) * itemsize() of them).
  std::span<const std::byte> sequence_bytes(uint64_t i) const;
  /// Sequence i's tokens, typed. Throws ferry::Error unless T is the dataset's element type.
  template <typename T>
  std::span<const T> sequence(uint64_t i) const;

  /// Tokens in all sequences: the length of the concatenated stream (the .bin's size / itemsize()).
  uint64_t total_tokens() const noexcept { return total_tokens_; }
  /// `count` tokens of the concatenated stream from token `first` on, as mapped bytes: sequences
  /// lie back to back in the .bin, so any token range is one contiguous byte range. Throws
  /// ferry::Error when the range runs past total_tokens().
  std::span<const std::byte> token_bytes(uint64_t first, uint64_t count) const;
  /// Copies `count` tokens from token `first` on to `out` (count * itemsize() bytes), from the
  /// mapping or, for a remote .bin, through the cache. Thread-safe; blocks on I/O. Throws as
  /// token_bytes(), or ferry::Error for a failed fetch ("stopped" when `stop` turns true).
  void read_tokens(uint64_t first, uint64_t count, void* out, const std::atomic<bool>* stop = nullptr) const;
  /// Whether the .bin is mapped (a local one): token_bytes() and sequence_bytes() need it.
  bool mapped() const noexcept { return bin_file_ == nullptr; }
  /// The remote .bin, or null for a mapped one.
  const std::shared_ptr<const DataFile>& bin_file() const noexcept { return bin_file_; }

  /// Documents. Megatron stores document_count() + 1 document indices: 0, then the index of the
  /// sequence after each document's last, ending with sequence_count().
  uint64_t document_count() const noexcept { return document_indices_ - 1; }
  /// Document index j, for j in [0, document_count()].
  uint64_t document_index(uint64_t j) const;
  /// The sequences [first, last) of document d; empty (first == last) for an empty document.
  std::pair<uint64_t, uint64_t> document_sequences(uint64_t d) const;
  /// The tokens [first, last) of document d in the concatenated stream.
  std::pair<uint64_t, uint64_t> document_tokens(uint64_t d) const;

  /// Whether the index ends with one int8 mode per sequence (Megatron's multimodal datasets).
  bool has_sequence_modes() const noexcept { return has_modes_; }
  /// Sequence i's mode; throws ferry::Error when the index has no modes or i is out of range.
  int8_t sequence_mode(uint64_t i) const;

  /// Byte offsets in the .idx of the arrays after the header.
  uint64_t lengths_offset() const noexcept { return kHeaderBytes; }
  uint64_t pointers_offset() const noexcept { return kHeaderBytes + 4 * sequence_count_; }
  uint64_t document_indices_offset() const noexcept { return kHeaderBytes + 12 * sequence_count_; }
  uint64_t modes_offset() const noexcept { return document_indices_offset() + 8 * document_indices_; }

 private:
  void validate();
  void check_sequence(uint64_t i, const char* what) const;
  template <typename T>
  T idx_value(uint64_t offset) const noexcept;
  [[noreturn]] void fail(const std::string& path, uint64_t offset, const std::string& cause) const;

  std::string prefix_;
  std::string idx_path_;
  std::string bin_path_;
  detail::MappedBytes idx_;
  size_t idx_bytes_ = 0;
  detail::MappedBytes bin_;
  size_t bin_bytes_ = 0;
  std::shared_ptr<const DataFile> bin_file_;  // a remote .bin
  IndexedDtype dtype_ = IndexedDtype::kInt32;
  size_t itemsize_ = 4;
  uint64_t sequence_count_ = 0;
  uint64_t document_indices_ = 0;  // entries in the .idx: document_count() + 1
  uint64_t total_tokens_ = 0;
  bool has_modes_ = false;
};

template <typename T>
constexpr IndexedDtype indexed_dtype_of() noexcept {
  if constexpr (std::is_same_v<T, uint8_t>)
    return IndexedDtype::kUInt8;
  else if constexpr (std::is_same_v<T, int8_t>)
    return IndexedDtype::kInt8;
  else if constexpr (std::is_same_v<T, int16_t>)
    return IndexedDtype::kInt16;
  else if constexpr (std::is_same_v<T, int32_t>)
    return IndexedDtype::kInt32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return IndexedDtype::kInt64;
  else if constexpr (std::is_same_v<T, double>)
    return IndexedDtype::kFloat64;
  else if constexpr (std::is_same_v<T, float>)
    return IndexedDtype::kFloat32;
  else {
    static_assert(std::is_same_v<T, uint16_t>, "not an element type of a Megatron indexed dataset");
    return IndexedDtype::kUInt16;
  }
}

template <typename T>
std::span<const T> IndexedDataset::sequence(uint64_t i) const {
  if (indexed_dtype_of<T>() != dtype_) {
    throw Error(idx_path_ + ": sequence(" + std::to_string(i) + ") asked for " +
                std::string(indexed_dtype_name(indexed_dtype_of<T>())) + " tokens, but the dataset holds " +
                std::string(indexed_dtype_name(dtype_)));
  }
  const std::span<const std::byte> bytes = sequence_bytes(i);
  // Aligned: the mapping starts on a page and every pointer is a multiple of itemsize() (validated).
  return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
}

}  // namespace ferry
