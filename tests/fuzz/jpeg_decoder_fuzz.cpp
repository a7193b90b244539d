// JpegDecoder (libjpeg-turbo behind it) on a hostile JPEG file (the input before its field-spec
// trailer, fuzz_support.h), with the resize and crop a config can ask for: trailer bits 5-7 switch
// on resize_shorter (its value: extra_value % 1024), a crop of the field's [H, W] (as
// make_field_decoders() makes it) and a random crop (decoded per sample, seeded by extra_value).
// A decoded image must be the field's uint8 [H, W, 3].

#include <ATen/ATen.h>

#include <ferry/io/decoders/jpeg_decoder.h>
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = ferry::fuzz::decoder_input({data, size});
  if (!input) return 0;
  const ferry::FieldSpec& spec = input->spec;
  ferry::JpegDecodeOptions options;
  if (input->extra_bits & 1) options.resize_shorter = input->extra_value % 1024;
  if ((input->extra_bits & 2) && spec.shape.size() == 3 && !spec.variable()) {
    options.crop_height = spec.shape[0];
    options.crop_width = spec.shape[1];
    if (input->extra_bits & 4) options.crop = ferry::JpegDecodeOptions::Crop::kRandom;
    options.seed = input->extra_value;
  }
  ferry::fuzz::refused_or_ok([&] {
    const ferry::JpegDecoder decoder(options);
    const at::Tensor encoded = ferry::fuzz::bytes_tensor(input->file);
    const at::Tensor out = options.crop == ferry::JpegDecodeOptions::Crop::kRandom
                               ? decoder.decode_sample(encoded, spec, {.epoch = input->extra_value, .index = size})
                               : decoder.decode(encoded, spec);
    ferry::fuzz::check_decoded(out, spec);
  });
  return 0;
}
