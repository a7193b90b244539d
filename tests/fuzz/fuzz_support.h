#pragma once

// What the fuzz targets in tests/fuzz/ share, and what the seed generator (make_seeds.cpp) uses to
// write inputs in the same layout.
//
// A target's input is bytes a hostile file could hold. Each target calls ferry's real API on them;
// a ferry::Error (ConfigError included) is the documented outcome for bad input and ends the run
// quietly. Anything else is a finding, reported by libFuzzer with the input that caused it: a crash,
// what ASan or UBSan reports, a hang, an allocation beyond -malloc_limit_mb (a size taken from the
// input and trusted), any other exception (it escapes LLVMFuzzerTestOneInput and aborts), and a
// broken promise that a target checks with FERRY_FUZZ_CHECK (a shape the decoder promised, a state
// that does not read back).

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>

#include <ferry/io/formats/source.h>
#include <ferry/pipeline/error.h>

namespace ferry::fuzz {

/// Aborts with the condition, file and line when a promise is broken: libFuzzer then keeps the input.
#define FERRY_FUZZ_CHECK(condition) \
  ((condition) ? void(0) : ::ferry::fuzz::check_failed(#condition, __FILE__, __LINE__))
[[noreturn]] void check_failed(const char* condition, const char* file, int line);

/// Called with every expected refusal: prints it when FERRY_FUZZ_VERBOSE is set, to see why a seed
/// or an input is refused.
void refused(const Error& error);

/// Runs `body`; a ferry::Error is an expected outcome (bad input refused), anything else propagates.
template <typename Body>
void refused_or_ok(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    refused(e);
  }
}

/// The bytes as what a Source hands a decoder: a 1-D uint8 tensor, copied into memory of exactly
/// their size so that ASan sees a read past their end (in libFuzzer's buffer a decoder's file is
/// followed by the trailer below; a std::string by its terminator).
at::Tensor bytes_tensor(std::span<const uint8_t> bytes);

// ---- the field a decoder target decodes into -------------------------------------------------
//
// Decoder targets read a field spec from the input's last kSpecBytes bytes (the file is everything
// before them), so that the fuzzer explores the spec checks together with the file:
//   [0]     dtype: kSpecDtypes[byte % size]
//   [1]     bits 0-2: rank (byte % 8, taken modulo 5: 0..4); bit 3: the first dimension is variable
//           (rank > 0); bit 4: a variable field has max_length; bits 5-7: for the target's own use
//   [2..5]  dimensions 0..3, 0..255 each
//   [6..7]  max_length, little-endian (and a number for the target's own use, extra_value)
inline constexpr size_t kSpecBytes = 8;
using SpecBytes = std::array<uint8_t, kSpecBytes>;
/// The dtypes a field may have; the decoders refuse some of them, which is part of what is fuzzed.
inline constexpr std::array<at::ScalarType, 10> kSpecDtypes{at::kByte,  at::kChar,  at::kShort, at::kInt,
                                                            at::kLong,  at::kBool,  at::kHalf,  at::kBFloat16,
                                                            at::kFloat, at::kDouble};

struct DecoderInput {
  std::span<const uint8_t> file;  // the encoded field
  FieldSpec spec;
  uint8_t extra_bits = 0;    // bits 5-7 of byte 1, 0..7
  uint16_t extra_value = 0;  // bytes 6-7, whether or not the field has a max_length
};
/// Splits a decoder target's input; nullopt when it is shorter than the trailer.
std::optional<DecoderInput> decoder_input(std::span<const uint8_t> data);
/// The trailer that makes decoder_input() give `spec` (dims above 255 are not representable),
/// `extra_bits` and (unless the spec has a max_length) `extra_value`; for the seed generator.
SpecBytes spec_bytes(const FieldSpec& spec, uint8_t extra_bits = 0, uint16_t extra_value = 0);

/// Checks what every decoder promises of a tensor it returns: the field's dtype, rank and fixed
/// dimensions, a variable length within max_length, C-contiguous, on the CPU.
void check_decoded(const at::Tensor& out, const FieldSpec& spec);

// ---- files -----------------------------------------------------------------------------------

/// A folder of its own for this process's scratch files, under $TMPDIR (or /tmp), made on first use
/// and removed at exit. For targets whose API takes a path (tar shards, Megatron datasets).
const std::string& scratch_dir();
/// Writes `bytes` to `path`, replacing it. Throws std::runtime_error on failure (the machine's
/// problem, not the input's: a finding that says so).
void write_file(const std::string& path, std::span<const uint8_t> bytes);
void write_file(const std::string& path, std::string_view bytes);

}  // namespace ferry::fuzz
