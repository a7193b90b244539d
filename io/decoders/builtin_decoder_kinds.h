#pragma once

#include "ferry/io/decoders/decoder_registry.h"

// The built-in decoders that take keys (the image decoders' geometry, json's select), which
// DecoderRegistry's constructor registers (image_decoder_kinds.cpp, json_decoder.cpp). Internal: not
// installed.

namespace ferry::detail {

/// raw, with truncate and pad_value (raw_decoder.cpp).
DecoderKind raw_decoder_kind();
DecoderKind jpeg_decoder_kind();
DecoderKind png_decoder_kind();
DecoderKind webp_decoder_kind();
DecoderKind image_decoder_kind();
/// json, with its `select` pointer (json_decoder.cpp).
DecoderKind json_decoder_kind();
/// sentencepiece, with its model and BOS/EOS/padding keys (sentencepiece_decoder.cpp).
DecoderKind sentencepiece_decoder_kind();

}  // namespace ferry::detail
