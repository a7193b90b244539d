#include "ferry/io/decoders/raw_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include <ATen/ops/full.h>

#include "ferry/io/decoders/builtin_decoder_kinds.h"
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

// The values an integer dtype holds, as doubles (int64's to within its doubles).
std::pair<double, double> integer_range(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBool: return {0, 1};
    case at::kByte: return {0, 255};
    case at::kChar: return {-128, 127};
    case at::kShort: return {-32768, 32767};
    case at::kInt: return {-2147483648.0, 2147483647.0};
    default: return {-9223372036854775808.0, 9223372036854775807.0};
  }
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

  int64_t inner = 1;  // elements per row (dim 0); per sample where the shape has no dimension
  for (size_t d = spec.shape.empty() ? 0 : 1; d < spec.shape.size(); ++d) inner *= spec.shape[d];
  const bool whole_rows = inner == 0 ? numel == 0 : numel % inner == 0;
  const int64_t rows = inner == 0 ? 0 : numel / inner;
  std::vector<int64_t> shape = spec.shape;
  if (spec.variable()) {
    if (!whole_rows) {
      throw Error("field '" + spec.name + "': " + std::to_string(numel) + " elements do not fill rows of shape " +
                  shape_text(spec.shape));
    }
    // Rows past max_length: cut where asked, else the decode stage says the field is too long.
    shape[0] = options_.truncate && spec.max_length ? std::min(rows, *spec.max_length) : rows;
  } else if (const int64_t elements = shape.empty() ? inner : shape[0] * inner; numel != elements) {
    const bool cut = options_.truncate && !shape.empty() && whole_rows && rows > shape[0];
    const bool pad = options_.pad_value && !shape.empty() && whole_rows && rows < shape[0];
    if (!cut && !pad) {
      const std::string advice = shape.empty()     ? ""
                                 : !whole_rows     ? ""
                                 : rows > shape[0] ? "; the raw decoder's truncate: true cuts longer ones"
                                                   : "; the raw decoder's pad_value fills up shorter ones";
      throw Error("field '" + spec.name + "': " + std::to_string(numel) + " elements do not make shape " +
                  shape_text(spec.shape) + " (" + std::to_string(elements) + " elements)" + advice);
    }
    if (pad) {
      at::Tensor padded = at::full(spec.shape, *options_.pad_value, at::TensorOptions().dtype(spec.dtype));
      if (numel > 0) {
        const auto byte_offset = static_cast<size_t>(bytes.storage_offset()) * bytes.element_size();
        std::memcpy(padded.data_ptr(), static_cast<const std::byte*>(bytes.storage().data()) + byte_offset,
                    static_cast<size_t>(numel * element));
      }
      return padded;
    }
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

namespace ferry::detail {

DecoderKind raw_decoder_kind() {
  using Type = KeySpec::Type;
  DecoderKind kind;
  kind.name = "raw";
  kind.description =
      "The bytes as the field's dtype and shape, without a copy; with truncate and pad_value, rows (dim 0) past "
      "the shape cut and fewer filled up.";
  kind.keys = {
      {.name = "truncate",
       .type = Type::kBoolean,
       .description = "Cut the rows (dim 0) past the field's length, or past max_length for a [null] field, instead "
                      "of failing on the sample.",
       .default_value = "false",
       .example = "true"},
      {.name = "pad_value",
       .type = Type::kNumber,
       .description = "Fill up a fixed-length field whose sample has fewer rows with this value (as the field's "
                      "dtype), instead of failing on the sample.",
       .default_value = "none: fewer rows are an error",
       .example = "0"},
  };
  kind.make = [](const DecoderArgs& args) -> std::shared_ptr<const Decoder> {
    static const auto plain = std::make_shared<const RawDecoder>();
    RawDecoder::Options options;
    options.truncate = args.keys.boolean_or("truncate", false);
    if (args.keys.find("pad_value") != nullptr) options.pad_value = args.keys.number_or("pad_value", 0);
    if (!options.truncate && !options.pad_value) return plain;
    return std::make_shared<const RawDecoder>(options);
  };
  kind.check = [](const KeyValue& field, KeyProblems& problems) {
    // Without a shape a field is bytes of any length: rows of one byte.
    const KeyValue* shape = field.find("shape");
    const bool rows = shape == nullptr || !shape->items().empty();
    for (const char* key : {"truncate", "pad_value"}) {
      if (const KeyValue* value = field.find(key); value != nullptr && !rows) {
        problems.add(*value, std::string(key) +
                                 " works on rows: give the field a shape with a first dimension, e.g. "
                                 "[1024] or [null]");
      }
    }
    const KeyValue* pad = field.find("pad_value");
    if (pad != nullptr && rows && (shape == nullptr || shape->items()[0].is_null())) {
      problems.add(*pad,
                   "pad_value fills a fixed length; a [null] field keeps its own (collate.pad_values pads "
                   "a batch)");
    } else if (pad != nullptr) {
      // The value must be one of the dtype's, or every short sample fails in the fill.
      const at::ScalarType dtype = parse_dtype(field.text_or("dtype", "uint8"));
      if (at::isIntegralType(dtype, /*includeBool=*/true)) {
        const double value = pad->number();
        const auto [low, high] = integer_range(dtype);
        if (value != std::floor(value) || value < low || value > high) {
          problems.add(*pad, "pad_value " + pad->text() + " is not a " + dtype_name(dtype) + " value");
        }
      }
    }
  };
  return kind;
}

}  // namespace ferry::detail
