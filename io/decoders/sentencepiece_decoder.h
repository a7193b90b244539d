#pragma once

#include <cstdint>
#include <memory>

#include "ferry/io/decoders/decoder.h"
#include "ferry/io/decoders/sentencepiece_model.h"

namespace ferry {

/// "sentencepiece": UTF-8 text (a 1-D uint8 tensor: a tar member's bytes, a JSON-lines string) to
/// the ids of a sentencepiece model, as the sentencepiece Python module's encode() gives them, with a
/// BOS id before and an EOS id after where asked. Out: int32 or int64 (spec.dtype):
/// - a fixed length [L]: the ids cut to L (BOS and EOS kept: the text's ids are cut to make room for
///   them), then padded with `pad_id` to L;
/// - a variable length [*] with a max_length M: the ids cut to M the same way, not padded (collate
///   pads a batch, `collate.pad_values`); without a max_length, all of them.
/// Thread-safe: the decode threads share one model.
class SentencePieceDecoder : public Decoder {
 public:
  struct Options {
    bool add_bos = false;
    bool add_eos = false;
    int64_t pad_id = 0;
  };

  /// Throws ferry::Error where the model lacks a BOS or EOS id that `options` ask for.
  SentencePieceDecoder(std::shared_ptr<const SentencePieceModel> model, Options options);

  std::string_view name() const override { return "sentencepiece"; }
  /// Throws ferry::Error for bytes that are not a 1-D uint8 tensor, a dtype other than int32/int64, a
  /// field shape other than [L] or [*], or what sentencepiece refuses.
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override;

 private:
  std::shared_ptr<const SentencePieceModel> model_;
  Options options_;
};

}  // namespace ferry
