#include "ferry/io/formats/indexed_dataset_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "ferry/io/formats/indexed_dataset_format.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;

[[noreturn]] void io_failed(const std::string& what, const std::string& path, uint64_t offset, int error) {
  throw Error("megatron writer: " + what + " " + path + " at byte offset " + std::to_string(offset) + ": " +
              std::strerror(error));
}

// Writes all of [data, data + bytes) at the descriptor's position (`offset` is only for messages).
void write_all(int fd, const std::byte* data, size_t bytes, const std::string& path, uint64_t offset) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, data, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      io_failed("cannot write", path, offset, errno);
    }
    data += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

template <typename T>
void write_value(std::vector<std::byte>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

// Converts tokens to T into `out`; returns the position of the first token that T cannot hold, or
// tokens.size() when all fit.
template <typename T>
size_t convert(std::span<const int64_t> tokens, std::vector<std::byte>& out) {
  out.resize(tokens.size() * sizeof(T));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        tokens[i] > static_cast<int64_t>(std::numeric_limits<T>::max())) {
      return i;
    }
    const auto value = static_cast<T>(tokens[i]);
    std::memcpy(out.data() + i * sizeof(T), &value, sizeof(T));
  }
  return tokens.size();
}

// The token ids `dtype` holds, as text: "[0, 65535]".
std::string range_text(IndexedDtype dtype) {
  int64_t low = std::numeric_limits<int64_t>::min();
  int64_t high = std::numeric_limits<int64_t>::max();
  switch (dtype) {
    case IndexedDtype::kUInt8: low = 0, high = std::numeric_limits<uint8_t>::max(); break;
    case IndexedDtype::kInt8:
      low = std::numeric_limits<int8_t>::min(), high = std::numeric_limits<int8_t>::max();
      break;
    case IndexedDtype::kInt16:
      low = std::numeric_limits<int16_t>::min(), high = std::numeric_limits<int16_t>::max();
      break;
    case IndexedDtype::kUInt16: low = 0, high = std::numeric_limits<uint16_t>::max(); break;
    case IndexedDtype::kInt32:
      low = std::numeric_limits<int32_t>::min(), high = std::numeric_limits<int32_t>::max();
      break;
    default: break;
  }
  std::string text = "[";
  text += std::to_string(low);
  text += ", ";
  text += std::to_string(high);
  text += "]";
  return text;
}

// Where a file is written before finalize() renames it into place.
std::string partial(const std::string& path) { return path + ".partial"; }

}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, IndexedDtype dtype)
    : bin_path_(prefix + ".bin"), idx_path_(prefix + ".idx"), dtype_(dtype), itemsize_(indexed_dtype_size(dtype)) {
  if (itemsize_ == 0 || dtype == IndexedDtype::kFloat32 || dtype == IndexedDtype::kFloat64) {
    throw Error("megatron writer " + bin_path_ + ": dtype " + std::string(indexed_dtype_name(dtype)) +
                " is not a token id type (uint8, int8, int16, uint16, int32, int64)");
  }
  // Written under other names and renamed into place by finalize(): a reader that has the old files
  // mapped keeps reading them (truncating a mapped file in place would kill it with SIGBUS).
  bin_fd_ = ::open(partial(bin_path_).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (bin_fd_ < 0) throw Error("megatron writer: cannot create " + bin_path_ + ": " + std::strerror(errno));
  buffer_.reserve(kBufferBytes);
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finalized_) discard();
}

void IndexedDatasetWriter::discard() noexcept {
  if (bin_fd_ >= 0) ::close(bin_fd_);
  bin_fd_ = -1;
  ::unlink(partial(bin_path_).c_str());
  ::unlink(partial(idx_path_).c_str());
}

void IndexedDatasetWriter::add_document(std::span<const int64_t> tokens) {
  if (tokens.empty()) {
    add_document(tokens, {});
    return;
  }
  const int64_t length = static_cast<int64_t>(tokens.size());
  add_document(tokens, std::span<const int64_t>(&length, 1));
}

void IndexedDatasetWriter::add_document(std::span<const int64_t> tokens, std::span<const int64_t> sequence_lengths) {
  // Built only for an error: this runs once per document.
  const auto where = [&] { return "megatron writer " + bin_path_ + ": document " + std::to_string(document_count()); };
  if (finalized_ || bin_fd_ < 0) throw Error(where() + ": the writer is already finalized");
  uint64_t sum = 0;
  for (const int64_t length : sequence_lengths) {
    if (length < 0 || length > std::numeric_limits<int32_t>::max()) {
      throw Error(where() + ": sequence length " + std::to_string(length) +
                  " is not in [0, 2^31 - 1] (stored as int32)");
    }
    sum += static_cast<uint64_t>(length);
  }
  if (sum != tokens.size()) {
    throw Error(where() + ": its sequence lengths add up to " + std::to_string(sum) + ", but it has " +
                std::to_string(tokens.size()) + " tokens");
  }
  size_t bad = 0;
  switch (dtype_) {
    case IndexedDtype::kUInt8: bad = convert<uint8_t>(tokens, scratch_); break;
    case IndexedDtype::kInt8: bad = convert<int8_t>(tokens, scratch_); break;
    case IndexedDtype::kInt16: bad = convert<int16_t>(tokens, scratch_); break;
    case IndexedDtype::kUInt16: bad = convert<uint16_t>(tokens, scratch_); break;
    case IndexedDtype::kInt32: bad = convert<int32_t>(tokens, scratch_); break;
    default: bad = convert<int64_t>(tokens, scratch_); break;  // int64: the constructor refused floats
  }
  if (bad != tokens.size()) {
    throw Error(where() + ": token " + std::to_string(tokens[bad]) + " at position " + std::to_string(bad) +
                " does not fit " + std::string(indexed_dtype_name(dtype_)) + " " + range_text(dtype_));
  }
  append(scratch_.data(), scratch_.size());
  for (const int64_t length : sequence_lengths) sequence_lengths_.push_back(static_cast<int32_t>(length));
  document_indices_.push_back(static_cast<int64_t>(sequence_lengths_.size()));
}

void IndexedDatasetWriter::append(const std::byte* data, size_t bytes) {
  if (buffer_.size() + bytes > kBufferBytes) flush();
  if (bytes >= kBufferBytes) {
    write_all(bin_fd_, data, bytes, bin_path_, written_);
    written_ += bytes;
  } else {
    buffer_.insert(buffer_.end(), data, data + bytes);
  }
  bin_offset_ += bytes;
}

void IndexedDatasetWriter::flush() {
  write_all(bin_fd_, buffer_.data(), buffer_.size(), bin_path_, written_);
  written_ += buffer_.size();
  buffer_.clear();
}

void IndexedDatasetWriter::finalize() {
  if (finalized_ || bin_fd_ < 0) throw Error("megatron writer " + bin_path_ + ": finalize() called twice");
  flush();
  const int bin_fd = bin_fd_;
  bin_fd_ = -1;
  // close() can be the first to report a failed write (NFS, a full disk).
  if (::close(bin_fd) != 0) io_failed("cannot close", bin_path_, written_, errno);

  const int fd = ::open(partial(idx_path_).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("megatron writer: cannot create " + idx_path_ + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};

  // Header, then the arrays; see Note [MMIDIDX layout] in indexed_dataset_format.h.
  std::vector<std::byte> chunk;
  chunk.reserve(kBufferBytes);
  const auto* magic = reinterpret_cast<const std::byte*>(detail::mmidx::kMagic);
  chunk.insert(chunk.end(), magic, magic + detail::mmidx::kMagicBytes);
  write_value<uint64_t>(chunk, detail::mmidx::kVersion);
  write_value<uint8_t>(chunk, static_cast<uint8_t>(dtype_));
  write_value<uint64_t>(chunk, sequence_lengths_.size());
  write_value<uint64_t>(chunk, document_indices_.size());
  uint64_t offset = 0;
  const auto put = [&](const std::byte* data, size_t bytes) {
    write_all(fd, data, bytes, idx_path_, offset);
    offset += bytes;
  };
  put(chunk.data(), chunk.size());
  put(reinterpret_cast<const std::byte*>(sequence_lengths_.data()), sequence_lengths_.size() * sizeof(int32_t));
  // Pointers: the running sum of length * itemsize from 0, as _IndexWriter computes them.
  int64_t pointer = 0;
  for (size_t first = 0; first < sequence_lengths_.size();) {
    chunk.clear();
    const size_t last = std::min(sequence_lengths_.size(), first + kBufferBytes / sizeof(int64_t));
    for (size_t i = first; i < last; ++i) {
      write_value<int64_t>(chunk, pointer);
      pointer += static_cast<int64_t>(sequence_lengths_[i]) * static_cast<int64_t>(itemsize_);
    }
    put(chunk.data(), chunk.size());
    first = last;
  }
  put(reinterpret_cast<const std::byte*>(document_indices_.data()), document_indices_.size() * sizeof(int64_t));
  closer.fd = -1;
  if (::close(fd) != 0) io_failed("cannot close", idx_path_, offset, errno);
  for (const std::string* path : {&bin_path_, &idx_path_}) {
    if (::rename(partial(*path).c_str(), path->c_str()) != 0) {
      const int error = errno;
      discard();
      throw Error("megatron writer: cannot rename " + partial(*path) + " to " + *path + ": " + std::strerror(error));
    }
  }
  finalized_ = true;
}

}  // namespace ferry
