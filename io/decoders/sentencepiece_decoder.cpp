#include "ferry/io/decoders/sentencepiece_decoder.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <ATen/ops/empty.h>

#include "ferry/io/decoders/builtin_decoder_kinds.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"

namespace ferry {

SentencePieceDecoder::SentencePieceDecoder(std::shared_ptr<const SentencePieceModel> model, Options options)
    : model_(std::move(model)), options_(options) {
  if (!model_) throw Error("the sentencepiece decoder needs a model");
  if (options_.add_bos && model_->ids().bos < 0) {
    throw Error("add_bos: the sentencepiece model '" + model_->path() + "' has no BOS piece (trained with bos_id=-1)");
  }
  if (options_.add_eos && model_->ids().eos < 0) {
    throw Error("add_eos: the sentencepiece model '" + model_->path() + "' has no EOS piece (trained with eos_id=-1)");
  }
}

namespace {

template <typename T>
void write_ids(at::Tensor& out, int32_t bos, const std::vector<int32_t>& body, int64_t body_count, int32_t eos,
               int64_t length, int64_t pad) {
  T* data = out.data_ptr<T>();
  int64_t at = 0;
  if (bos >= 0) data[at++] = static_cast<T>(bos);
  for (int64_t i = 0; i < body_count; ++i) data[at++] = static_cast<T>(body[static_cast<size_t>(i)]);
  if (eos >= 0) data[at++] = static_cast<T>(eos);
  std::fill(data + at, data + length, static_cast<T>(pad));
}

}  // namespace

at::Tensor SentencePieceDecoder::decode(const at::Tensor& encoded, const FieldSpec& spec) const {
  if (encoded.scalar_type() != at::kByte || encoded.dim() != 1) {
    throw Error("the sentencepiece decoder takes text (1-D uint8 bytes), found " + dtype_name(encoded.scalar_type()) +
                " of " + std::to_string(encoded.dim()) + " dimensions");
  }
  if (spec.dtype != at::kInt && spec.dtype != at::kLong) {
    throw Error("the sentencepiece decoder makes int32 or int64 ids, not " + dtype_name(spec.dtype));
  }
  if (spec.shape.size() != 1) throw Error("the sentencepiece decoder makes ids of shape [L] or [null]");
  const at::Tensor bytes = encoded.is_contiguous() ? encoded : encoded.contiguous();
  const std::string_view text(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                              static_cast<size_t>(bytes.numel()));

  const int32_t bos = options_.add_bos ? model_->ids().bos : -1;
  const int32_t eos = options_.add_eos ? model_->ids().eos : -1;
  const int64_t specials = (bos >= 0 ? 1 : 0) + (eos >= 0 ? 1 : 0);
  // The most ids the output holds; unbounded for a variable length without max_length.
  const int64_t bound = spec.variable() ? spec.max_length.value_or(std::numeric_limits<int64_t>::max()) : spec.shape[0];
  if (bound < specials) {
    throw Error("a length of " + std::to_string(bound) + " leaves no room for the BOS and EOS ids");
  }
  // One buffer per decode thread: a sample allocates only its output.
  thread_local std::vector<int32_t> body;
  const int64_t room = bound - specials;
  body.resize(static_cast<size_t>(std::min<int64_t>(room, std::max<int64_t>(text.size(), 16))));
  int64_t count = model_->encode(text, body.data(), static_cast<int64_t>(body.size()));
  while (count > static_cast<int64_t>(body.size()) && static_cast<int64_t>(body.size()) < room) {
    // More ids than bytes (a text of one-byte words: each gets its word-start piece too): again, with
    // room for more (a count above the room given may be short of the text's: SentencePieceModel::encode).
    body.resize(static_cast<size_t>(std::min(room, std::max<int64_t>(count, 2 * static_cast<int64_t>(body.size())))));
    count = model_->encode(text, body.data(), static_cast<int64_t>(body.size()));
  }
  const int64_t kept = std::min(count, room);
  const int64_t length = spec.variable() ? kept + specials : spec.shape[0];
  at::Tensor out = at::empty({length}, at::TensorOptions().dtype(spec.dtype));
  if (spec.dtype == at::kInt) {
    write_ids<int32_t>(out, bos, body, kept, eos, length, options_.pad_id);
  } else {
    write_ids<int64_t>(out, bos, body, kept, eos, length, options_.pad_id);
  }
  return out;
}

namespace detail {

DecoderKind sentencepiece_decoder_kind() {
  using Type = KeySpec::Type;
  DecoderKind kind;
  kind.name = "sentencepiece";
  kind.description =
      "UTF-8 text to the ids of a sentencepiece model (as the sentencepiece Python module encodes it), int32 or "
      "int64: a field of [L] is cut and padded to L ids, one of [null] is cut to max_length; BOS and EOS where "
      "asked, kept when the text is cut.";
  kind.keys = {
      {.name = "model",
       .type = Type::kPath,
       .description = "The sentencepiece model file (spm_train's `.model`).",
       .default_value = "required",
       .example = "tokenizer.model",
       .min = 1},
      {.name = "add_bos",
       .type = Type::kBoolean,
       .description = "Put the model's BOS id first.",
       .default_value = "false",
       .example = "true"},
      {.name = "add_eos",
       .type = Type::kBoolean,
       .description = "Put the model's EOS id last (after the cut, so a cut text still ends with it).",
       .default_value = "false",
       .example = "true"},
      {.name = "pad_id",
       .type = Type::kInteger,
       .description = "The id that fills a fixed-length field after the text's ids: -100 makes them ignored by "
                      "cross_entropy's default ignore_index.",
       .default_value = "the model's pad id, or 0 where it has none",
       .example = "-100",
       .min = std::numeric_limits<int32_t>::min(),
       .max = std::numeric_limits<int32_t>::max()},
  };
  kind.make = [](const DecoderArgs& args) -> std::shared_ptr<const Decoder> {
    const KeyValue* model_key = args.keys.find("model");
    if (model_key == nullptr) throw Error("the sentencepiece decoder needs `model`, the model file");
    auto model = SentencePieceModel::load(model_key->text());
    SentencePieceDecoder::Options options;
    options.add_bos = args.keys.boolean_or("add_bos", false);
    options.add_eos = args.keys.boolean_or("add_eos", false);
    options.pad_id = args.keys.integer_or("pad_id", std::max(model->ids().pad, 0));
    return std::make_shared<SentencePieceDecoder>(std::move(model), options);
  };
  kind.check = [](const KeyValue& field, KeyProblems& problems) {
    const KeyValue* dtype = field.find("dtype");
    if (dtype == nullptr || (dtype->text() != "int32" && dtype->text() != "int64")) {
      problems.add(dtype != nullptr ? *dtype : field,
                   std::string("the sentencepiece decoder makes int32 or int64 ids: give the field dtype: int64") +
                       (dtype != nullptr ? ", found " + dtype->text() : ""));
    }
    // Without a shape, a field of any length ([null]), as the sources give it.
    const KeyValue* shape = field.find("shape");
    const bool one_dim = shape == nullptr || shape->items().size() == 1;
    if (!one_dim) {
      problems.add(shape != nullptr ? *shape : field,
                   "the sentencepiece decoder makes ids of shape [L] (cut and padded to L) or [null] (cut to "
                   "max_length), e.g. shape: [1024]");
    }
    const KeyValue* model_key = field.find("model");
    if (model_key == nullptr) {
      problems.add(field.key() + ".model", field, "missing required key: the sentencepiece model file");
      return;
    }
    std::shared_ptr<const SentencePieceModel> model;
    try {
      model = SentencePieceModel::load(model_key->text());
    } catch (const Error& e) {
      problems.add(*model_key, e.cause());
      return;
    }
    const int64_t specials =
        (field.boolean_or("add_bos", false) ? 1 : 0) + (field.boolean_or("add_eos", false) ? 1 : 0);
    for (const bool bos : {true, false}) {
      const KeyValue* value = field.find(bos ? "add_bos" : "add_eos");
      const int32_t id = bos ? model->ids().bos : model->ids().eos;
      if (value != nullptr && value->boolean() && id < 0) {
        problems.add(*value, "the model '" + model_key->text() + "' has no " + (bos ? "BOS" : "EOS") +
                                 " piece (trained with " + (bos ? "bos_id" : "eos_id") + "=-1)");
      }
    }
    if (shape != nullptr && one_dim && !shape->items()[0].is_null() && shape->items()[0].integer() < specials) {
      problems.add(*shape, "a length of " + shape->items()[0].text() + " leaves no room for the BOS and EOS ids");
    }
  };
  return kind;
}

}  // namespace detail
}  // namespace ferry
