#include "ferry/io/decoders/npy_encoder.h"

#include <ATen/ATen.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/io/decoders/npy_format.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

// The elements are copied byte for byte from the tensor: only right where the machine's byte order
// is the file's (little-endian, as 'descr' says).
static_assert(std::endian::native == std::endian::little, "encode_npy assumes a little-endian machine");

using detail::npy::kAlignment;
using detail::npy::kMagic;

struct Stored {
  const char* descr;
  at::ScalarType dtype;  // the tensor written (narrower than the input's for unsigned storage)
};

Stored stored_as(at::ScalarType dtype, bool store_unsigned) {
  switch (dtype) {
    case at::kBool: return {"|b1", at::kBool};
    case at::kByte: return {"|u1", at::kByte};
    case at::kChar: return {"|i1", at::kChar};
    case at::kShort: return {"<i2", at::kShort};
    case at::kInt: return store_unsigned ? Stored{"<u2", at::kShort} : Stored{"<i4", at::kInt};
    case at::kLong: return store_unsigned ? Stored{"<u4", at::kInt} : Stored{"<i8", at::kLong};
    case at::kHalf: return {"<f2", at::kHalf};
    case at::kFloat: return {"<f4", at::kFloat};
    case at::kDouble: return {"<f8", at::kDouble};
    default:
      throw Error("npy encoder: dtype " + dtype_name(dtype) +
                  " has no .npy type ferry reads (bool, uint8, int8, int16, int32, int64, float16, float32, float64)");
  }
}

// Python's repr of the shape tuple: "()", "(64,)", "(3, 4)".
std::string shape_tuple(at::IntArrayRef shape) {
  std::string text = "(";
  for (size_t d = 0; d < shape.size(); ++d) text += (d == 0 ? "" : ", ") + std::to_string(shape[d]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

at::Tensor encode_npy(const at::Tensor& array, const NpyEncodeOptions& options) {
  if (!array.device().is_cpu()) {
    throw Error("npy encoder: the tensor is on " + array.device().str() + "; copy it to the CPU first");
  }
  const Stored stored = stored_as(array.scalar_type(), options.store_unsigned);
  at::Tensor values = array;
  if (stored.dtype != array.scalar_type()) {
    // Unsigned storage: 'u2' in the low 16 bits of an int16, 'u4' in the low 32 of an int32.
    const int64_t limit = stored.dtype == at::kShort ? int64_t{0xFFFF} : int64_t{0xFFFFFFFF};
    if (array.numel() > 0) {
      const int64_t low = array.min().item<int64_t>(), high = array.max().item<int64_t>();
      if (low < 0 || high > limit) {
        throw Error("npy encoder: cannot store " + dtype_name(array.scalar_type()) + " values in [" +
                    std::to_string(low) + ", " + std::to_string(high) + "] as '" + stored.descr + "' (0.." +
                    std::to_string(limit) + ")");
      }
    }
    // The signed value with the same bits: v - 2^n for v >= 2^(n-1), exact, no out-of-range cast.
    const at::Tensor wide = array.to(at::kLong);
    values = (wide - (wide > limit / 2).to(at::kLong) * (limit + 1)).to(stored.dtype);
  }
  // Fortran order is C order of the reversed dimensions.
  if (options.fortran_order && values.dim() > 1) {
    std::vector<int64_t> reverse(static_cast<size_t>(values.dim()));
    for (size_t d = 0; d < reverse.size(); ++d) reverse[d] = static_cast<int64_t>(reverse.size() - 1 - d);
    values = values.permute(reverse);
  }
  values = values.contiguous();

  std::string header = std::string("{'descr': '") + stored.descr +
                       "', 'fortran_order': " + (options.fortran_order ? "True" : "False") +
                       ", 'shape': " + shape_tuple(array.sizes()) + ", }";
  const size_t preamble = detail::npy::kPreambleBytes;
  header.append((kAlignment - (preamble + header.size() + 1) % kAlignment) % kAlignment, ' ');
  header += '\n';
  if (header.size() > 0xFFFF) {
    throw Error("npy encoder: a header of " + std::to_string(header.size()) + " bytes does not fit format 1.0");
  }
  const auto data_bytes = static_cast<int64_t>(values.nbytes());
  const auto header_bytes = static_cast<int64_t>(preamble + header.size());
  at::Tensor out = at::empty({header_bytes + data_bytes}, at::kByte);
  auto* p = out.data_ptr<uint8_t>();
  std::memcpy(p, kMagic.data(), kMagic.size());
  p[6] = 1;  // version 1.0
  p[7] = 0;
  p[8] = static_cast<uint8_t>(header.size() & 0xFF);
  p[9] = static_cast<uint8_t>(header.size() >> 8);
  std::memcpy(p + preamble, header.data(), header.size());
  if (data_bytes > 0) std::memcpy(p + header_bytes, values.data_ptr(), static_cast<size_t>(data_bytes));
  return out;
}

}  // namespace ferry
