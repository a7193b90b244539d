#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ferry/io/formats/indexed_dataset.h"

namespace ferry {

/// Writes a Megatron-LM indexed dataset, `<prefix>.bin` and `<prefix>.idx`, byte for byte as
/// Megatron's IndexedDatasetBuilder + _IndexWriter do (see Note [MMIDIDX layout] in
/// indexed_dataset_format.h), for tests and for dataset-making tools.
///
/// In: documents of token ids, in order. Out: the two files; the .bin grows as documents come, the
/// .idx is written by finalize(). Owns: the open .bin (a descriptor and a 1 MiB write buffer) and
/// the lengths and document indices (12 bytes per sequence, 8 per document) until finalize().
///
/// One thread at a time: not thread-safe. Every method blocks on file I/O (or may: writes are
/// buffered). I/O errors throw ferry::Error naming the file and the byte offset.
class IndexedDatasetWriter {
 public:
  /// Writes `<prefix>.bin.partial` and `<prefix>.idx.partial`, which finalize() renames into place:
  /// a dataset already there stays whole (and readable by a run that has it mapped) until then.
  /// `dtype` must be an integer type: token ids.
  IndexedDatasetWriter(std::string prefix, IndexedDtype dtype);
  /// Without finalize(), or after it failed: closes and removes the partial files (a half-written
  /// dataset is never left to be read). Never throws.
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  /// One document of one sequence, as Megatron's preprocess_data.py writes by default. An empty
  /// document gets no sequence (as preprocess_data.py does for a text with no tokens): its document
  /// index repeats the previous one. Throws ferry::Error, writing nothing, if a token does not fit
  /// the dtype (Megatron would wrap it silently) or the document has more than 2^31 - 1 tokens.
  void add_document(std::span<const int64_t> tokens);
  /// One document split into sequences of the given lengths (sentences, in Megatron's terms), which
  /// must add up to tokens.size(); a length may be 0 (Megatron's add_item of an empty tensor).
  void add_document(std::span<const int64_t> tokens, std::span<const int64_t> sequence_lengths);

  /// Flushes and closes the .bin, writes the .idx, then renames both into place (.bin first).
  /// Throws ferry::Error on an I/O error (the destructor then removes the partial files) and when
  /// called twice.
  void finalize();

  const std::string& bin_path() const noexcept { return bin_path_; }
  const std::string& idx_path() const noexcept { return idx_path_; }
  IndexedDtype dtype() const noexcept { return dtype_; }
  uint64_t document_count() const noexcept { return document_indices_.size() - 1; }
  uint64_t sequence_count() const noexcept { return sequence_lengths_.size(); }
  uint64_t token_count() const noexcept { return bin_offset_ / itemsize_; }

 private:
  void append(const std::byte* data, size_t bytes);
  void flush();
  void discard() noexcept;

  std::string bin_path_;
  std::string idx_path_;
  IndexedDtype dtype_;
  size_t itemsize_;
  int bin_fd_ = -1;
  std::vector<std::byte> buffer_;
  uint64_t written_ = 0;     // bytes of the .bin on disk
  uint64_t bin_offset_ = 0;  // bytes of the .bin written or buffered
  std::vector<int32_t> sequence_lengths_;
  std::vector<int64_t> document_indices_{0};
  std::vector<std::byte> scratch_;  // one document in the on-disk dtype
  bool finalized_ = false;
};

}  // namespace ferry
