#include "tests/fuzz/fuzz_support.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "tests/support/temp_dir.h"

namespace ferry::fuzz {

void check_failed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "ferry fuzz: check failed at %s:%d: %s\n", file, line, condition);
  std::abort();
}

void refused(const Error& error) {
  static const bool verbose = std::getenv("FERRY_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "ferry fuzz: refused: %s\n", error.what());
}

at::Tensor bytes_tensor(std::span<const uint8_t> bytes) {
  // libtorch's CPU allocator asks for exactly the bytes (posix_memalign), which ASan bounds.
  at::Tensor out = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  if (!bytes.empty()) std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

std::optional<DecoderInput> decoder_input(std::span<const uint8_t> data) {
  if (data.size() < kSpecBytes) return std::nullopt;
  const std::span<const uint8_t> trailer = data.last(kSpecBytes);
  DecoderInput input;
  input.file = data.first(data.size() - kSpecBytes);
  input.spec.name = "x";
  input.spec.dtype = kSpecDtypes[trailer[0] % kSpecDtypes.size()];
  const size_t rank = (trailer[1] & 7) % 5;
  for (size_t d = 0; d < rank; ++d) input.spec.shape.push_back(trailer[2 + d]);
  if (rank > 0 && (trailer[1] & 0x08)) {
    input.spec.shape[0] = kVariableLength;
    if (trailer[1] & 0x10) input.spec.max_length = trailer[6] | (trailer[7] << 8);
  }
  input.extra_bits = static_cast<uint8_t>(trailer[1] >> 5);
  input.extra_value = static_cast<uint16_t>(trailer[6] | (trailer[7] << 8));
  return input;
}

SpecBytes spec_bytes(const FieldSpec& spec, uint8_t extra_bits, uint16_t extra_value) {
  SpecBytes out{};
  out[6] = static_cast<uint8_t>(extra_value & 0xFF);
  out[7] = static_cast<uint8_t>(extra_value >> 8);
  for (size_t i = 0; i < kSpecDtypes.size(); ++i) {
    if (kSpecDtypes[i] == spec.dtype) out[0] = static_cast<uint8_t>(i);
  }
  out[1] = static_cast<uint8_t>(spec.shape.size() | (extra_bits << 5));
  if (spec.variable()) out[1] |= 0x08;
  if (spec.variable() && spec.max_length) {
    out[1] |= 0x10;
    out[6] = static_cast<uint8_t>(*spec.max_length & 0xFF);
    out[7] = static_cast<uint8_t>((*spec.max_length >> 8) & 0xFF);
  }
  for (size_t d = 0; d < spec.shape.size() && d < 4; ++d) {
    out[2 + d] = static_cast<uint8_t>(spec.shape[d] == kVariableLength ? 0 : spec.shape[d]);
  }
  return out;
}

void check_decoded(const at::Tensor& out, const FieldSpec& spec) {
  FERRY_FUZZ_CHECK(out.defined());
  FERRY_FUZZ_CHECK(out.device().is_cpu());
  FERRY_FUZZ_CHECK(out.scalar_type() == spec.dtype);
  FERRY_FUZZ_CHECK(out.dim() == static_cast<int64_t>(spec.shape.size()));
  FERRY_FUZZ_CHECK(out.is_contiguous());
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    if (d == 0 && spec.variable()) {
      FERRY_FUZZ_CHECK(!spec.max_length || out.size(0) <= *spec.max_length);
    } else {
      FERRY_FUZZ_CHECK(out.size(static_cast<int64_t>(d)) == spec.shape[d]);
    }
  }
}

const std::string& scratch_dir() {
  // Destroyed at exit, which removes the folder; a crash leaves it behind, with the input in it.
  static const std::unique_ptr<testing::TempDir> dir = std::make_unique<testing::TempDir>("ferry_fuzz");
  return dir->path();
}

void write_file(const std::string& path, std::span<const uint8_t> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("fuzz: cannot write " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      const int error = errno;
      ::close(fd);
      throw std::runtime_error("fuzz: cannot write " + path + ": " + std::strerror(error));
    }
    done += static_cast<size_t>(wrote);
  }
  ::close(fd);
}

void write_file(const std::string& path, std::string_view bytes) {
  write_file(path, std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

}  // namespace ferry::fuzz
