#include "ferry/io/decoders/label_decoder.h"

#include <charconv>
#include <limits>
#include <string_view>

#include <ATen/ops/empty.h>

#include "ferry/io/util/dtype_names.h"
#include "ferry/io/util/printable.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// The label's text for a message, quoted: printable ASCII kept, other bytes escaped, long text cut.
std::string quoted(std::string_view text) { return "'" + printable(text, 40) + "'"; }

template <typename T>
void store(at::Tensor& out, int64_t value, const FieldSpec& spec, std::string_view text) {
  if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()) {
    throw Error("label " + quoted(text) + " does not fit " + dtype_name(spec.dtype));
  }
  *out.data_ptr<T>() = static_cast<T>(value);
}

}  // namespace

at::Tensor LabelDecoder::decode(const at::Tensor& encoded, const FieldSpec& spec) const {
  int64_t numel = 1;
  for (int64_t size : spec.shape) numel *= size;
  if (spec.variable() || numel != 1) {
    throw Error("the label decoder makes one value; declare shape [] or [1]");
  }
  if (spec.dtype != at::kLong && spec.dtype != at::kInt && spec.dtype != at::kShort && spec.dtype != at::kByte) {
    throw Error("the label decoder makes int64, int32, int16 or uint8, not " + dtype_name(spec.dtype));
  }
  if (encoded.scalar_type() != at::kByte || encoded.dim() != 1) {
    throw Error("label text must be a 1-D uint8 tensor of ASCII bytes");
  }
  const at::Tensor bytes = encoded.is_contiguous() ? encoded : encoded.contiguous();
  const std::string_view text(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));

  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && is_space(text[begin])) ++begin;
  while (end > begin && is_space(text[end - 1])) --end;
  // from_chars takes '-' but not '+'; "+-1" stays invalid.
  const bool plus = begin < end && text[begin] == '+';
  if (plus) ++begin;
  int64_t value = 0;
  const char* first = text.data() + begin;
  const char* last = text.data() + end;
  const auto [stop, error] = std::from_chars(first, last, value);
  if (begin == end || error == std::errc::invalid_argument || stop != last || (plus && text[begin] == '-')) {
    throw Error("label " + quoted(text) + " is not a decimal integer");
  }
  if (error == std::errc::result_out_of_range) {
    throw Error("label " + quoted(text) + " does not fit int64");
  }

  at::Tensor out = at::empty(spec.shape, spec.dtype);
  switch (spec.dtype) {
    case at::kLong: store<int64_t>(out, value, spec, text); break;
    case at::kInt: store<int32_t>(out, value, spec, text); break;
    case at::kShort: store<int16_t>(out, value, spec, text); break;
    default: store<uint8_t>(out, value, spec, text); break;
  }
  return out;
}

}  // namespace ferry
