#pragma once

#include <ATen/core/Tensor.h>

namespace ferry {

struct NpyEncodeOptions {
  /// Store an int32 tensor as 'u2' and an int64 tensor as 'u4' (every value must fit), the inverse
  /// of NpyDecoder, which widens those unsigned types into int32 and int64 because libtorch has no
  /// uint16 and uint32 on every build ferry supports. Other dtypes are stored as they are.
  bool store_unsigned = false;
  /// Write the data in Fortran (column-major) order, with 'fortran_order': True. The default is C order.
  bool fortran_order = false;
};

/// A tensor in, the bytes of a NumPy .npy file out (a 1-D uint8 tensor, what a Source hands
/// NpyDecoder): format version 1.0, the header dict {'descr', 'fortran_order', 'shape'} in the
/// order and spelling numpy.save writes, padded with spaces and a '\n' so the data starts at a
/// multiple of 64 bytes, then the elements, little-endian. Any rank, including 0-d ('shape': ())
/// and empty arrays; any strides (the data is written in the order the options say).
///
/// dtypes, as 'descr': bool '|b1', uint8 '|u1', int8 '|i1', int16 '<i2', int32 '<i4' (or '<u2'),
/// int64 '<i8' (or '<u4'), float16 '<f2', float32 '<f4', float64 '<f8' — every one NpyDecoder reads.
/// numpy.load reads the result as numpy.save's own output.
///
/// Thread-safe (no state); allocates the result and, for a non-contiguous tensor or Fortran order,
/// a contiguous copy; does not block. Throws ferry::Error for another dtype (bfloat16, complex, ...),
/// a tensor not on the CPU, or (store_unsigned) a value outside the unsigned range, naming it.
at::Tensor encode_npy(const at::Tensor& array, const NpyEncodeOptions& options = {});

}  // namespace ferry
