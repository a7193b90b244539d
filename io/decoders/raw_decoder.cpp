#include "ferry/io/decoders/raw_decoder.h"

#include <sstream>

#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    out << (i ? ", " : "");
    if (shape[i] == kVariableLength) {
      out << "*";
    } else {
      out << shape[i];
    }
  }
  out << "]";
  return out.str();
}

}  // namespace

at::Tensor RawDecoder::decode(const at::Tensor& encoded, const FieldSpec& spec) const {
  // Already decoded (a source holding tensors): hand it on without a single tensor op — a batch of
  // thousands of small fields would otherwise pay microseconds per field.
  if (encoded.scalar_type() == spec.dtype && !spec.variable() && encoded.sizes().equals(spec.shape)) return encoded;
  const at::Tensor bytes = encoded.is_contiguous() ? encoded : encoded.contiguous();
  const at::Tensor typed = bytes.scalar_type() == spec.dtype ? bytes.reshape({-1}) : [&] {
    if (bytes.scalar_type() != at::kByte) {
      throw Error("field '" + spec.name + "': raw data must be uint8 bytes or already " + dtype_name(spec.dtype) +
                  ", found " + dtype_name(bytes.scalar_type()));
    }
    const int64_t element = static_cast<int64_t>(c10::elementSize(spec.dtype));
    if (bytes.numel() % element != 0) {
      throw Error("field '" + spec.name + "': " + std::to_string(bytes.numel()) + " bytes are not a whole number of " +
                  dtype_name(spec.dtype) + " elements");
    }
    return bytes.reshape({-1}).view(spec.dtype);
  }();

  int64_t inner = 1;
  for (size_t d = spec.variable() ? 1 : 0; d < spec.shape.size(); ++d) inner *= spec.shape[d];
  std::vector<int64_t> shape = spec.shape;
  if (spec.variable()) {
    if (inner == 0 ? typed.numel() != 0 : typed.numel() % inner != 0) {
      throw Error("field '" + spec.name + "': " + std::to_string(typed.numel()) +
                  " elements do not fill rows of shape " + shape_text(spec.shape));
    }
    shape[0] = inner == 0 ? 0 : typed.numel() / inner;
  } else if (typed.numel() != inner) {
    throw Error("field '" + spec.name + "': " + std::to_string(typed.numel()) + " elements do not make shape " +
                shape_text(spec.shape) + " (" + std::to_string(inner) + " elements)");
  }
  return typed.view(shape);
}

}  // namespace ferry
