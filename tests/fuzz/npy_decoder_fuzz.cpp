// NpyDecoder on a hostile .npy file (the input before its field-spec trailer, fuzz_support.h).
// Bits 5-7 of the trailer pick the cast rule (bit 5: Cast::kAny). A decoded array must have the
// field's dtype and shape, and an array whose dtype the encoder can write must read back the same
// after encode_npy(): the reader and the writer agree on every array the reader accepts.

#include <ATen/ATen.h>

#include <cstring>

#include <ferry/io/decoders/npy_decoder.h>
#include <ferry/io/decoders/npy_encoder.h>
#include "tests/fuzz/fuzz_support.h"

namespace {

using ferry::NpyDecodeOptions;

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  // Bytes, not values: NaN != NaN, and the decoder must keep payloads exactly.
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         (a.numel() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = ferry::fuzz::decoder_input({data, size});
  if (!input) return 0;
  const NpyDecodeOptions options{.cast = (input->extra_bits & 1) ? NpyDecodeOptions::Cast::kAny
                                                                 : NpyDecodeOptions::Cast::kLossless};
  const ferry::NpyDecoder decoder(options);
  ferry::fuzz::refused_or_ok([&] {
    const at::Tensor out = decoder.decode(ferry::fuzz::bytes_tensor(input->file), input->spec);
    ferry::fuzz::check_decoded(out, input->spec);
    if (out.scalar_type() == at::kBFloat16) return;  // .npy has no bfloat16: encode_npy refuses it
    const at::Tensor file = ferry::encode_npy(out);
    const at::Tensor again = decoder.decode(file, input->spec);
    FERRY_FUZZ_CHECK(same_bytes(out, again));
  });
  return 0;
}
