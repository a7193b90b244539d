// JsonDecoder on hostile JSON text (the input before its field-spec trailer, fuzz_support.h). A
// decoded tensor must have the field's dtype and shape, and its values written back as JSON text
// must decode to the same bytes: what the parser accepted is what the text said. The decoder's own
// "json: internal error" (its values and the shape it found disagree) is a finding, not a refusal.

#include <ATen/ATen.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include <ferry/io/decoders/json_decoder.h>
#include "tests/fuzz/fuzz_support.h"

namespace {

bool is_floating(at::ScalarType dtype) {
  return dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat || dtype == at::kDouble;
}

// JSON text for `values` (C-contiguous, as int64 or float64) of `shape`, from dimension `d` on.
void write_json(std::string& out, const at::Tensor& values, at::IntArrayRef shape, size_t d, int64_t& next) {
  if (d == shape.size()) {
    char text[40];
    if (values.scalar_type() == at::kDouble) {
      std::snprintf(text, sizeof text, "%.17g", values.data_ptr<double>()[next++]);
    } else {
      std::snprintf(text, sizeof text, "%" PRId64, values.data_ptr<int64_t>()[next++]);
    }
    out += text;
    return;
  }
  out += '[';
  for (int64_t i = 0; i < shape[d]; ++i) {
    if (i > 0) out += ',';
    write_json(out, values, shape, d + 1, next);
  }
  out += ']';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = ferry::fuzz::decoder_input({data, size});
  if (!input) return 0;
  const ferry::JsonDecoder decoder;
  ferry::fuzz::refused_or_ok([&] {
    at::Tensor out;
    try {
      out = decoder.decode(ferry::fuzz::bytes_tensor(input->file), input->spec);
    } catch (const ferry::Error& e) {
      FERRY_FUZZ_CHECK(!e.cause().starts_with("json: internal error"));
      throw;
    }
    ferry::fuzz::check_decoded(out, input->spec);
    const at::Tensor values = out.to(is_floating(out.scalar_type()) ? at::kDouble : at::kLong).contiguous();
    std::string text;
    int64_t next = 0;
    write_json(text, values, out.sizes(), 0, next);
    const at::Tensor again = decoder.decode(
        ferry::fuzz::bytes_tensor({reinterpret_cast<const uint8_t*>(text.data()), text.size()}), input->spec);
    FERRY_FUZZ_CHECK(again.sizes() == out.sizes());
    FERRY_FUZZ_CHECK(out.numel() == 0 || std::memcmp(again.data_ptr(), out.data_ptr(), out.nbytes()) == 0);
  });
  return 0;
}
