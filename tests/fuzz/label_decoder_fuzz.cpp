// LabelDecoder on hostile label text (the input before its field-spec trailer, fuzz_support.h). A
// decoded label must have the field's dtype and shape, and its value written as decimal text must
// decode to the same value.

#include <ATen/ATen.h>

#include <string>

#include <ferry/io/decoders/label_decoder.h>
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = ferry::fuzz::decoder_input({data, size});
  if (!input) return 0;
  const ferry::LabelDecoder decoder;
  ferry::fuzz::refused_or_ok([&] {
    const at::Tensor out = decoder.decode(ferry::fuzz::bytes_tensor(input->file), input->spec);
    ferry::fuzz::check_decoded(out, input->spec);
    const int64_t value = out.to(at::kLong).item<int64_t>();
    const std::string text = std::to_string(value);
    const at::Tensor again = decoder.decode(
        ferry::fuzz::bytes_tensor({reinterpret_cast<const uint8_t*>(text.data()), text.size()}), input->spec);
    FERRY_FUZZ_CHECK(again.to(at::kLong).item<int64_t>() == value);
  });
  return 0;
}
