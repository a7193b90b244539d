#pragma once

#include "ferry/io/decoders/decoder.h"

namespace ferry {

/// "label": the encoded field is an integer class label written as ASCII text, as WebDataset's
/// ".cls" members are ("17", "17\n", " -3 "): optional surrounding whitespace, an optional sign and
/// decimal digits. In: a 1-D uint8 tensor of those bytes. Out: a tensor of spec.dtype (int64, int32,
/// int16 or uint8) holding the value, shaped spec.shape, which must have exactly one element (a
/// scalar [] or [1]). Stateless; decode() is thread-safe and allocates only the result.
class LabelDecoder : public Decoder {
 public:
  std::string_view name() const override { return "label"; }
  /// Throws ferry::Error quoting the text when it is not an integer or does not fit spec.dtype, and
  /// for a spec that is not a one-element integer field. The decode stage adds the sample and field.
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override;
};

}  // namespace ferry
