#include "ferry/io/decoders/raw_decoder.h"

#include <sstream>

#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/tensor_views.h"

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
  const auto element = static_cast<int64_t>(c10::elementSize(spec.dtype));
  if (bytes.scalar_type() != spec.dtype) {
    if (bytes.scalar_type() != at::kByte) {
      throw Error("field '" + spec.name + "': raw data must be uint8 bytes or already " + dtype_name(spec.dtype) +
                  ", found " + dtype_name(bytes.scalar_type()));
    }
    if (bytes.numel() % element != 0) {
      throw Error("field '" + spec.name + "': " + std::to_string(bytes.numel()) + " bytes are not a whole number of " +
                  dtype_name(spec.dtype) + " elements");
    }
  }
  const int64_t numel = bytes.scalar_type() == spec.dtype ? bytes.numel() : bytes.numel() / element;

  int64_t inner = 1;
  for (size_t d = spec.variable() ? 1 : 0; d < spec.shape.size(); ++d) inner *= spec.shape[d];
  std::vector<int64_t> shape = spec.shape;
  if (spec.variable()) {
    if (inner == 0 ? numel != 0 : numel % inner != 0) {
      throw Error("field '" + spec.name + "': " + std::to_string(numel) + " elements do not fill rows of shape " +
                  shape_text(spec.shape));
    }
    shape[0] = inner == 0 ? 0 : numel / inner;
  } else if (numel != inner) {
    throw Error("field '" + spec.name + "': " + std::to_string(numel) + " elements do not make shape " +
                shape_text(spec.shape) + " (" + std::to_string(inner) + " elements)");
  }
  // The view made without the dispatcher: reshape and view cost a microsecond or so each, a third of a
  // small sample's decode (pipeline/tensor_views.h). Bytes that do not start at a whole element (a
  // member at an odd offset of a file read in one piece) are copied to a fresh buffer first.
  const auto byte_offset = static_cast<size_t>(bytes.storage_offset()) * bytes.element_size();
  if (byte_offset % static_cast<size_t>(element) != 0) {
    const at::Tensor copy = bytes.clone();
    return make_view(copy.storage(), copy.device(), spec.dtype, 0, shape);
  }
  return make_view(bytes.storage(), bytes.device(), spec.dtype, byte_offset, shape);
}

}  // namespace ferry
