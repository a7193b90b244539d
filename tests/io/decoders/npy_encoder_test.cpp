#include <ferry/io/decoders/npy_encoder.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <ferry/io/decoders/npy_decoder.h>
#include <ferry/pipeline/error.h>
#include "tests/support/error_text.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tensor_bytes.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;
using testing::text_of;

// What a case writes and what NumPy must read back.
struct Case {
  at::Tensor array;
  NpyEncodeOptions options;
  std::string descr;  // as numpy's dtype.str spells it
};

const at::ScalarType kDtypes[] = {at::kBool, at::kByte, at::kChar,  at::kShort, at::kInt,
                                  at::kLong, at::kHalf, at::kFloat, at::kDouble};

std::string descr_of(at::ScalarType dtype, bool store_unsigned) {
  switch (dtype) {
    case at::kBool: return "|b1";
    case at::kByte: return "|u1";
    case at::kChar: return "|i1";
    case at::kShort: return "<i2";
    case at::kInt: return store_unsigned ? "<u2" : "<i4";
    case at::kLong: return store_unsigned ? "<u4" : "<i8";
    case at::kHalf: return "<f2";
    case at::kFloat: return "<f4";
    default: return "<f8";
  }
}

// A random array: shape of rank 0..4 (a dimension 0 now and then), values over the dtype's whole
// range, floats with inf, -inf, NaN and -0.0 among them; sometimes a non-contiguous view.
Case random_case(std::mt19937_64& rng) {
  Case c;
  const at::ScalarType dtype = kDtypes[rng() % std::size(kDtypes)];
  c.options.store_unsigned = (dtype == at::kInt || dtype == at::kLong) && rng() % 2 == 0;
  c.options.fortran_order = rng() % 3 == 0;
  c.descr = descr_of(dtype, c.options.store_unsigned);
  std::vector<int64_t> shape(rng() % 5);
  for (int64_t& d : shape) d = rng() % 12 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 6);
  std::vector<int64_t> allocated = shape;
  const bool strided = !shape.empty() && rng() % 3 == 0;
  if (strided) allocated.back() *= 2;
  at::Tensor values = at::empty(allocated, at::kLong);
  int64_t* v = values.data_ptr<int64_t>();
  for (int64_t i = 0; i < values.numel(); ++i) v[i] = static_cast<int64_t>(rng());
  at::Tensor array;
  if (dtype == at::kBool) {
    array = values.remainder(2).to(at::kBool);
  } else if (c.options.store_unsigned) {
    array = values.remainder(dtype == at::kInt ? int64_t{65536} : int64_t{1} << 32).abs().to(dtype);
  } else if (at::isFloatingType(dtype)) {
    array = at::randn(allocated, at::TensorOptions(at::kDouble)).mul(1000).to(dtype);
    if (array.numel() >= 4) {
      at::Tensor flat = array.view({-1});
      flat[0] = std::numeric_limits<double>::infinity();
      flat[1] = -std::numeric_limits<double>::infinity();
      flat[2] = std::numeric_limits<double>::quiet_NaN();
      flat[3] = -0.0;
    }
  } else {
    array = values.to(dtype);  // wraps: every bit pattern of the narrow type
  }
  c.array = strided ? array.slice(static_cast<int64_t>(shape.size()) - 1, 0, c10::nullopt, 2) : array;
  return c;
}

// The decoder reads u2 and u4 back into int32 and int64: the original dtype.
FieldSpec spec_of(const at::Tensor& array) {
  return FieldSpec{"x", array.scalar_type(), array.sizes().vec(), std::nullopt, "npy"};
}

TEST(NpyEncoder, RoundTripsThroughTheDecoderForEveryDtypeShapeAndOrder) {
  at::manual_seed(5);
  std::mt19937_64 rng(5);
  const NpyDecoder decoder;
  int zero_d = 0, empty = 0, fortran = 0, unsigned_ = 0, strided = 0;
  for (int round = 0; round < 600; ++round) {
    const Case c = random_case(rng);
    SCOPED_TRACE("round " + std::to_string(round) + ": " + c.descr + " shape " +
                 ::testing::PrintToString(c.array.sizes().vec()) + (c.options.fortran_order ? " fortran" : ""));
    const at::Tensor bytes = encode_npy(c.array, c.options);
    const at::Tensor decoded = decoder.decode(bytes, spec_of(c.array));
    ASSERT_EQ(decoded.sizes(), c.array.sizes());
    ASSERT_EQ(decoded.scalar_type(), c.array.scalar_type());
    EXPECT_EQ(text_of(decoded), text_of(c.array));  // bit for bit, NaN and -0.0 included
    // The data starts at a multiple of 64, as numpy.save writes it.
    const uint8_t* p = bytes.data_ptr<uint8_t>();
    EXPECT_EQ((10 + (p[8] | (p[9] << 8))) % 64, 0);
    zero_d += c.array.dim() == 0;
    empty += c.array.numel() == 0;
    fortran += c.options.fortran_order && c.array.dim() > 1;
    unsigned_ += c.options.store_unsigned;
    strided += !c.array.is_contiguous();
  }
  EXPECT_GT(zero_d, 20);
  EXPECT_GT(empty, 20);
  EXPECT_GT(fortran, 50);
  EXPECT_GT(unsigned_, 30);
  EXPECT_GT(strided, 50);
}

TEST(NpyEncoder, WritesTheHeaderNumpySaveWrites) {
  const auto header_of = [](const at::Tensor& bytes) {
    const uint8_t* p = bytes.data_ptr<uint8_t>();
    return std::string(reinterpret_cast<const char*>(p), 10 + static_cast<size_t>(p[8] | (p[9] << 8)));
  };
  const std::string magic("\x93NUMPY\x01\x00", 8);
  // numpy.save(f, np.zeros(64, np.float32)): 118 bytes of header after the 10-byte preamble.
  const at::Tensor features = encode_npy(at::arange(64, at::kFloat));
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (64,), }";
  EXPECT_EQ(header_of(features),
            magic + std::string("\x76\x00", 2) + dict + std::string(117 - dict.size(), ' ') + "\n");
  EXPECT_EQ(features.numel(), 128 + 64 * 4);
  EXPECT_EQ(text_of(features.slice(0, 128)), text_of(at::arange(64, at::kFloat)));

  EXPECT_TRUE(contains(header_of(encode_npy(at::scalar_tensor(7, at::kLong))),
                       "{'descr': '<i8', 'fortran_order': False, 'shape': (), }"));
  EXPECT_TRUE(contains(header_of(encode_npy(at::zeros({3, 4}, at::kByte))),
                       "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 4), }"));
  EXPECT_TRUE(contains(header_of(encode_npy(at::zeros({0, 2}, at::kHalf), {.fortran_order = true})),
                       "{'descr': '<f2', 'fortran_order': True, 'shape': (0, 2), }"));
  EXPECT_TRUE(contains(header_of(encode_npy(at::zeros({2}, at::kInt), {.store_unsigned = true})), "'descr': '<u2'"));
  // Fortran order: columns first.
  const at::Tensor matrix = at::arange(6, at::kShort).reshape({2, 3});
  const at::Tensor stored = encode_npy(matrix, {.fortran_order = true});
  EXPECT_EQ(text_of(stored.slice(0, 128)), text_of(matrix.t().contiguous()));
}

TEST(NpyEncoder, RefusesWhatTheDecoderCannotRead) {
  EXPECT_TRUE(contains(error_of([] { encode_npy(at::zeros({2}, at::kBFloat16)); }), "bfloat16"));
  EXPECT_TRUE(contains(error_of([] { encode_npy(at::zeros({2}, at::kComplexFloat)); }), "ComplexFloat"));
  EXPECT_TRUE(contains(error_of([] { encode_npy(at::full({2}, -1, at::kInt), {.store_unsigned = true}); }), "'<u2'"));
  EXPECT_TRUE(
      contains(error_of([] { encode_npy(at::full({2}, 65536, at::kInt), {.store_unsigned = true}); }), "65536"));
  EXPECT_TRUE(contains(
      error_of([] { encode_npy(at::full({2}, int64_t{1} << 32, at::kLong), {.store_unsigned = true}); }), "'<u4'"));
  // The whole unsigned range is fine.
  const at::Tensor edges = at::tensor({int64_t{0}, int64_t{65535}}).to(at::kInt);
  EXPECT_TRUE(NpyDecoder().decode(encode_npy(edges, {.store_unsigned = true}), spec_of(edges)).equal(edges));
  const at::Tensor wide = at::tensor({int64_t{0}, (int64_t{1} << 32) - 1});
  EXPECT_TRUE(NpyDecoder().decode(encode_npy(wide, {.store_unsigned = true}), spec_of(wide)).equal(wide));
}

// NumPy itself reads every file back: dtype, shape and values (where python3 has numpy).
constexpr const char* kPython = "/usr/bin/python3";
constexpr const char* kCheck = R"(
import sys
import numpy as np
folder = sys.argv[1]
bad = 0
for line in open(folder + '/manifest.txt'):
    name, descr, kind, rank, *dims = line.split()
    a = np.load(folder + '/' + name)
    want = np.fromfile(folder + '/' + name + '.raw', dtype=kind).reshape([int(d) for d in dims])
    if a.dtype.str != descr or list(a.shape) != [int(d) for d in dims] or not np.array_equal(a.astype(kind), want, equal_nan=(kind == '<f8')):
        print('mismatch', line.strip(), a.dtype.str, a.shape)
        bad += 1
sys.exit(1 if bad else 0)
)";

TEST(NpyEncoder, NumpyLoadsWhatItWrites) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " not found: cannot read .npy files with NumPy";
  if (std::system((std::string(kPython) + " -c 'import numpy' > /dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << kPython << " has no numpy: cannot read .npy files with NumPy";
  }
  const testing::TempDir dir("ferry_npy_encoder");
  at::manual_seed(8);
  std::mt19937_64 rng(8);
  std::ofstream manifest(dir / "manifest.txt");
  for (int i = 0; i < 200; ++i) {
    const Case c = random_case(rng);
    std::string name = "a";  // (not "a" + std::to_string(i): g++ 12 warns about it, -Wrestrict, wrongly)
    name += std::to_string(i) + ".npy";
    const at::Tensor bytes = encode_npy(c.array, c.options);
    std::ofstream(dir / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), bytes.numel());
    const bool floating = at::isFloatingType(c.array.scalar_type());
    const std::string values = text_of(c.array.to(floating ? at::kDouble : at::kLong));
    std::ofstream(dir / (name + ".raw"), std::ios::binary)
        .write(values.data(), static_cast<std::streamsize>(values.size()));
    manifest << name << ' ' << c.descr << ' ' << (floating ? "<f8" : "<i8") << ' ' << c.array.dim();
    for (const int64_t d : c.array.sizes()) manifest << ' ' << d;
    manifest << '\n';
  }
  manifest.close();
  {
    std::ofstream script(dir / "check.py");
    script << kCheck;
  }
  const std::string command = std::string(kPython) + " " + (dir / "check.py") + " " + dir.path();
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

}  // namespace
}  // namespace ferry
