#include <ferry/io/decoders/npy_decoder.h>

#include <ATen/ATen.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/pipeline/error.h>
#include "tests/support/error_text.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tensor_bytes.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;
using testing::tensor_of_text;
using testing::text_of;

using Cast = NpyDecodeOptions::Cast;

constexpr const char* kMagic = "\x93NUMPY";

// A .npy file as NumPy writes it: preamble, the dict padded with spaces to a multiple of 64 bytes
// and ended by '\n', then the data. `dict` is used verbatim, so tests can break it.
std::string npy_file(const std::string& dict, const std::string& data, int major = 1) {
  const size_t preamble = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file(kMagic, 6);
  file += static_cast<char>(major);
  file += '\0';
  for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) file += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return file + header + data;
}

std::string dict_of(const std::string& descr, bool fortran, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': " + shape + ", }";
}

FieldSpec spec_of(at::ScalarType dtype, std::vector<int64_t> shape, std::optional<int64_t> max_length = std::nullopt) {
  return FieldSpec{"x", dtype, std::move(shape), max_length, "npy"};
}

// A fresh folder for one test's files, removed at the end.
struct ScratchDir : testing::TempDir {
  ScratchDir() : testing::TempDir("ferry_npy_test") {}
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

constexpr const char* kPython = "/usr/bin/python3";

// Writes every dtype x shape x order x format version with NumPy itself, plus each array's values
// in C order (u2 and u4 widened to i4 and i8, as ferry reads them) and a manifest line per file:
//   <file> <expected descr> <fortran_order written> <major version> <ndim> <dims...>
constexpr const char* kWriteArrays = R"(
import sys
import numpy as np
out = sys.argv[1]
rng = np.random.default_rng(1234)
descrs = ['|b1', '|u1', '|i1', '<i2', '<u2', '<i4', '<u4', '<i8', '<f2', '<f4', '<f8']
shapes = [(), (5,), (3, 4), (2, 3, 4), (0, 3), (4, 1, 3), (3, 2, 2, 5)]
widen = {'<u2': '<i4', '<u4': '<i8'}
lines = []
for descr in descrs:
    dt = np.dtype(descr)
    for shape in shapes:
        for order in 'CF':
            for version in [(1, 0), (2, 0), (3, 0)]:
                if dt.kind == 'b':
                    a = np.array(rng.integers(0, 2, size=shape), dtype=dt)
                elif dt.kind in 'iu':
                    info = np.iinfo(dt)
                    a = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt)
                else:
                    a = np.array(rng.standard_normal(size=shape) * 1000, dtype=dt)
                    if a.size >= 4:
                        a.flat[0], a.flat[1], a.flat[2], a.flat[3] = np.inf, -np.inf, np.nan, -0.0
                a = np.array(a, dtype=dt, order=order)  # (np.ascontiguousarray would make a scalar 1-D)
                name = 'a%d.npy' % len(lines)
                with open(out + '/' + name, 'wb') as f:
                    np.lib.format.write_array(f, a, version=version)
                expected = np.array(a, dtype=widen.get(descr, descr), order='C')
                with open(out + '/' + name + '.raw', 'wb') as f:
                    f.write(expected.tobytes(order='C'))
                fortran = int(a.flags.f_contiguous and not a.flags.c_contiguous)
                lines.append(' '.join([name, widen.get(descr, descr), str(fortran), str(version[0]), str(len(shape))] +
                                      [str(d) for d in shape]))
with open(out + '/manifest.txt', 'w') as f:
    f.write('\n'.join(lines) + '\n')
)";

TEST(NpyDecoder, ReadsWhatNumpyWritesForEveryDtypeOrderAndVersion) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " not found: cannot write .npy files with NumPy";
  if (std::system((std::string(kPython) + " -c 'import numpy' > /dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << kPython << " has no numpy: cannot write .npy files with NumPy";
  }
  const ScratchDir dir;
  {
    std::ofstream script(dir / "write_arrays.py");
    script << kWriteArrays;
  }
  const std::string command = std::string(kPython) + " " + (dir / "write_arrays.py") + " " + dir.path();
  ASSERT_EQ(std::system(command.c_str()), 0) << command;

  const std::map<std::string, at::ScalarType> dtypes{{"|b1", at::kBool},  {"|u1", at::kByte},  {"|i1", at::kChar},
                                                     {"<i2", at::kShort}, {"<i4", at::kInt},   {"<i8", at::kLong},
                                                     {"<f2", at::kHalf},  {"<f4", at::kFloat}, {"<f8", at::kDouble}};
  const NpyDecoder decoder;
  std::istringstream manifest(read_file(dir / "manifest.txt"));
  int files = 0, fortran_files = 0;
  std::map<int, int> versions;
  for (std::string line; std::getline(manifest, line);) {
    std::istringstream fields(line);
    std::string name, descr;
    int fortran = 0, version = 0;
    size_t rank = 0;
    fields >> name >> descr >> fortran >> version >> rank;
    std::vector<int64_t> shape(rank);
    for (int64_t& d : shape) fields >> d;
    ASSERT_TRUE(dtypes.count(descr)) << line;
    const at::Tensor decoded = decoder.decode(tensor_of_text(read_file(dir / name)), spec_of(dtypes.at(descr), shape));
    EXPECT_EQ(decoded.scalar_type(), dtypes.at(descr)) << line;
    EXPECT_EQ(decoded.sizes(), shape) << line;
    EXPECT_TRUE(decoded.is_contiguous()) << line;
    EXPECT_EQ(text_of(decoded), read_file(dir / (name + ".raw"))) << line;  // bit for bit, NaNs included
    ++files;
    fortran_files += fortran;
    ++versions[version];
  }
  EXPECT_EQ(files, 11 * 7 * 2 * 3);
  EXPECT_GT(fortran_files, 100);
  EXPECT_EQ(versions.size(), 3u);
}

TEST(NpyDecoder, TransposesFortranOrderIntoCOrder) {
  // Column-major data of a 2x3 array [[0, 1, 2], [3, 4, 5]] is 0 3 1 4 2 5.
  const at::Tensor column_major = at::tensor({0, 3, 1, 4, 2, 5}, at::kInt);
  const at::Tensor decoded = NpyDecoder().decode(
      tensor_of_text(npy_file(dict_of("<i4", true, "(2, 3)"), text_of(column_major))), spec_of(at::kInt, {2, 3}));
  EXPECT_TRUE(decoded.equal(at::arange(6, at::kInt).view({2, 3})));
  EXPECT_TRUE(decoded.is_contiguous());
}

TEST(NpyDecoder, ConvertsOnlyWithoutLossUnlessToldOtherwise) {
  const NpyDecoder decoder;
  const auto file = [](const std::string& descr, const at::Tensor& values) {
    return tensor_of_text(
        npy_file(dict_of(descr, false, "(" + std::to_string(values.numel()) + ",)"), text_of(values)));
  };
  const at::Tensor u1 = at::tensor({0, 1, 128, 255}, at::kByte);
  EXPECT_TRUE(decoder.decode(file("|u1", u1), spec_of(at::kFloat, {4})).equal(u1.to(at::kFloat)));
  EXPECT_TRUE(decoder.decode(file("|u1", u1), spec_of(at::kBFloat16, {4})).equal(u1.to(at::kBFloat16)));
  EXPECT_TRUE(decoder.decode(file("|u1", u1), spec_of(at::kInt, {4})).equal(u1.to(at::kInt)));
  const at::Tensor i2 = at::tensor({-32768, -1, 0, 32767}, at::kShort);
  EXPECT_TRUE(decoder.decode(file("<i2", i2), spec_of(at::kFloat, {4})).equal(i2.to(at::kFloat)));
  const at::Tensor u2_bits = at::tensor({0, 1, -1, -32768}, at::kShort);  // 0, 1, 65535, 32768 as uint16
  EXPECT_TRUE(
      decoder.decode(file("<u2", u2_bits), spec_of(at::kInt, {4})).equal(at::tensor({0, 1, 65535, 32768}, at::kInt)));
  const at::Tensor f2 = at::tensor({0.5f, -2.25f, 65504.0f}).to(at::kHalf);
  EXPECT_TRUE(decoder.decode(file("<f2", f2), spec_of(at::kFloat, {3})).equal(f2.to(at::kFloat)));
  const at::Tensor i4 = at::tensor({16777217, -5}, at::kInt);
  EXPECT_TRUE(decoder.decode(file("<i4", i4), spec_of(at::kLong, {2})).equal(i4.to(at::kLong)));
  const at::Tensor b1 = at::tensor({1, 0}, at::kByte).to(at::kBool);
  EXPECT_TRUE(decoder.decode(file("|b1", b1), spec_of(at::kByte, {2})).equal(at::tensor({1, 0}, at::kByte)));

  const at::Tensor f8 = at::tensor({0.1, 1e300, -3.5}, at::kDouble);
  std::string message = error_of([&] { decoder.decode(file("<f8", f8), spec_of(at::kFloat, {3})); });
  EXPECT_TRUE(contains(message, "'<f8' would lose values as the field's float32")) << message;
  EXPECT_TRUE(contains(message, "Cast::kAny")) << message;
  error_of([&] { decoder.decode(file("<i4", i4), spec_of(at::kFloat, {2})); });
  error_of([&] { decoder.decode(file("<f4", at::tensor({1.5f})), spec_of(at::kHalf, {1})); });
  error_of([&] { decoder.decode(file("<i8", at::tensor({int64_t{1}}, at::kLong)), spec_of(at::kInt, {1})); });
  error_of([&] { decoder.decode(file("|i1", at::tensor({-1}, at::kChar)), spec_of(at::kByte, {1})); });
  error_of([&] { decoder.decode(file("<f2", f2), spec_of(at::kBFloat16, {3})); });

  const NpyDecoder any({.cast = Cast::kAny}, "npy_any");
  EXPECT_EQ(any.name(), "npy_any");
  EXPECT_TRUE(any.decode(file("<f8", f8), spec_of(at::kFloat, {3})).equal(f8.to(at::kFloat)));
  EXPECT_TRUE(any.decode(file("<i4", i4), spec_of(at::kFloat, {2})).equal(i4.to(at::kFloat)));
}

TEST(NpyDecoder, ChecksTheShapeAgainstTheField) {
  const NpyDecoder decoder;
  const auto rows = [](int64_t n) {
    return tensor_of_text(
        npy_file(dict_of("<f4", false, "(" + std::to_string(n) + ", 4)"), text_of(at::randn({n, 4}))));
  };
  EXPECT_EQ(decoder.decode(rows(7), spec_of(at::kFloat, {kVariableLength, 4}, 10)).sizes(),
            (std::vector<int64_t>{7, 4}));
  EXPECT_EQ(decoder.decode(rows(0), spec_of(at::kFloat, {kVariableLength, 4}, 10)).sizes(),
            (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(decoder.decode(rows(70), spec_of(at::kFloat, {kVariableLength, 4})).sizes(), (std::vector<int64_t>{70, 4}));
  std::string message = error_of([&] { decoder.decode(rows(11), spec_of(at::kFloat, {kVariableLength, 4}, 10)); });
  EXPECT_TRUE(contains(message, "longer than the field's max_length 10")) << message;
  message = error_of([&] { decoder.decode(rows(3), spec_of(at::kFloat, {3, 5})); });
  EXPECT_TRUE(contains(message, "shape (3, 4) does not match the field's (3, 5)")) << message;
  error_of([&] { decoder.decode(rows(3), spec_of(at::kFloat, {12})); });
  error_of([&] { decoder.decode(rows(3), spec_of(at::kFloat, {kVariableLength, 4, 1})); });
  const at::Tensor scalar =
      NpyDecoder().decode(tensor_of_text(npy_file(dict_of("<i8", false, "()"), text_of(at::tensor({int64_t{42}})))),
                          spec_of(at::kLong, {}));
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item<int64_t>(), 42);
}

TEST(NpyDecoder, NamesWhatIsWrongWithMalformedFilesAndWhere) {
  const NpyDecoder decoder;
  const FieldSpec spec = spec_of(at::kFloat, {3, 4});
  const std::string data = text_of(at::randn({3, 4}));
  const std::string good = npy_file(dict_of("<f4", false, "(3, 4)"), data);
  ASSERT_EQ(good.size(), 128u + 48u);  // the dict pads the header to 128 bytes
  const auto error_for = [&](const std::string& file) {
    return error_of([&] { decoder.decode(tensor_of_text(file), spec); });
  };
  const auto expect_error = [&](const std::string& file, const std::string& what, int64_t offset) {
    const std::string message = error_for(file);
    EXPECT_TRUE(contains(message, what)) << message;
    EXPECT_TRUE(contains(message, "at byte " + std::to_string(offset)))
        << message << " (expected byte " << offset << ")";
  };
  // Offsets inside the dict: the dict starts at byte 10 in a version 1.0 file.
  const auto in_dict = [](const std::string& dict, const std::string& part) {
    return static_cast<int64_t>(10 + dict.find(part));
  };

  std::string bad = good;
  bad[3] = 'X';
  expect_error(bad, "bad magic", 3);
  expect_error("", "truncated .npy file (0 bytes)", 0);
  bad = good;
  bad[6] = 4;
  expect_error(bad, "unsupported .npy format version 4.0", 6);
  bad = good;
  bad[8] = bad[9] = static_cast<char>(0xFF);
  expect_error(bad, "header length 65535 runs past the end of the 176-byte file", 8);
  bad = npy_file(dict_of("<f4", false, "(3, 4)"), data, 2);
  bad[8] = bad[9] = bad[10] = bad[11] = static_cast<char>(0xFF);
  expect_error(bad, "header length 4294967295 runs past the end", 8);
  expect_error(good.substr(0, good.size() - 1),
               "the data is 47 bytes but shape (3, 4) of '<f4' needs 48 (truncated file?)", 128);
  expect_error(good + "x", "the data is 49 bytes", 128);

  std::string dict = dict_of(">f4", false, "(3, 4)");
  expect_error(npy_file(dict, data), "big-endian dtype '>f4' is not supported", in_dict(dict, ">f4"));
  dict = dict_of("|O", false, "(3, 4)");
  expect_error(npy_file(dict, data), "object arrays ('|O')", in_dict(dict, "|O"));
  dict = dict_of("<c8", false, "(3, 4)");
  expect_error(npy_file(dict, data), "unsupported dtype '<c8'", in_dict(dict, "<c8"));
  dict = "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3, 4), }";
  expect_error(npy_file(dict, data), "expected True or False", in_dict(dict, "Maybe"));
  dict = "{'descr': '<f4', 'fortran_order': False, }";
  expect_error(npy_file(dict, data), "the header dict has no 'shape'", 10);
  dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), 'shape': (3, 4)}";
  expect_error(npy_file(dict, data), "key 'shape' appears twice", in_dict(dict, "'shape': (3, 4)}"));
  dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), 'colour': 'red'}";
  expect_error(npy_file(dict, data), "unexpected key 'colour'", in_dict(dict, "'colour'"));
  dict = "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }";
  expect_error(npy_file(dict, data), "structured dtypes", in_dict(dict, "["));
  dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, -4), }";
  expect_error(npy_file(dict, data), "expected a non-negative integer in 'shape', found '-'", in_dict(dict, "-4"));
  dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4) }x";
  expect_error(npy_file(dict, data), "unexpected text after the header dict", in_dict(dict, "x"));
  dict = "{'descr': '<f4, 'fortran_order': False, 'shape': (3, 4), }";
  error_for(npy_file(dict, data));
  dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999), }";
  expect_error(npy_file(dict, data), "is too large", 10);
  // Python 2 longs and double quotes, as old NumPy and other writers produce, are fine.
  dict = "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3L, 4L)}";
  EXPECT_EQ(text_of(decoder.decode(tensor_of_text(npy_file(dict, data)), spec)), data);
}

// Every message is printable ASCII: a header's bytes may be anything, and a byte that is not UTF-8
// in a message broke Python's str of the error (UnicodeDecodeError instead of ferry.Error).
bool printable_ascii(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c < 0x7F; });
}

TEST(NpyDecoder, MessagesEscapeTheBytesTheyShowFromTheHeader) {
  const NpyDecoder decoder;
  const FieldSpec spec = spec_of(at::kFloat, {3});
  const std::string data = text_of(at::randn({3}));
  const std::string aa(1, static_cast<char>(0xAA));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'k" + aa + "y': 1}", "unexpected key 'k\\xaay'"},
      {"{'descr': '<f" + aa + "', 'fortran_order': False, 'shape': (3,), }", "unsupported dtype '<f\\xaa'"},
      {"{'descr': '" + aa + "f4', 'fortran_order': False, 'shape': (3,), }", "dtype '\\xaaf4' has no byte-order"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'shape" + aa + "\n", "unterminated string"},
      {"{'sh" + aa + "pe' (3,)}", "expected ':' after key 'sh\\xaape'"},
      {"{'descr': '<f4', 'fortran_order': " + aa + "}", "expected True or False"},
  };
  for (const auto& [dict, what] : cases) {
    const std::string message = error_of([&] { decoder.decode(tensor_of_text(npy_file(dict, data)), spec); });
    EXPECT_TRUE(contains(message, what)) << message;
    EXPECT_TRUE(printable_ascii(message)) << message;
  }
}

TEST(NpyDecoder, RefusesEveryTruncationAndSurvivesRandomDamage) {
  const NpyDecoder decoder;
  const FieldSpec spec = spec_of(at::kShort, {kVariableLength, 3});
  for (const int major : {1, 2}) {
    const std::string good =
        npy_file(dict_of("<i2", false, "(5, 3)"), text_of(at::randint(-999, 999, {5, 3}, at::kShort)), major);
    for (size_t keep = 0; keep < good.size(); ++keep)
      error_of([&] { decoder.decode(tensor_of_text(good.substr(0, keep)), spec); });
    // Damage anywhere in the preamble and the header: an Error or a correctly shaped tensor,
    // never a crash or a read past the end (run under ASan to see the latter).
    std::mt19937_64 rng(static_cast<uint64_t>(major));
    for (int round = 0; round < 5000; ++round) {
      std::string damaged = good;
      for (int flips = 0; flips < 1 + round % 3; ++flips) {
        damaged[rng() % 72] = static_cast<char>(round % 2 ? rng() % 256 : " ',:()0123456789TrueFalse{}<>|"[rng() % 29]);
      }
      if (rng() % 4 == 0) damaged.resize(rng() % damaged.size());
      try {
        const at::Tensor out = decoder.decode(tensor_of_text(damaged), spec);
        EXPECT_EQ(out.dim(), 2);
        EXPECT_EQ(out.size(1), 3);
      } catch (const Error& error) {
        EXPECT_TRUE(printable_ascii(error.what())) << error.what();
      }
    }
  }
  error_of([&] { decoder.decode(at::zeros({3}, at::kInt), spec); });
}

TEST(NpyDecoder, IsBuiltInAndConfiguredOnesRegisterUnderTheirOwnNames) {
  DecoderRegistry registry;
  EXPECT_EQ(registry.find("npy")->name(), "npy");
  registry.add(std::make_shared<NpyDecoder>(NpyDecodeOptions{.cast = Cast::kAny}, "npy_cast"));
  const at::Tensor f8 = at::tensor({1.25, -2.0}, at::kDouble);
  EXPECT_TRUE(
      registry.find("npy_cast")
          ->decode(tensor_of_text(npy_file(dict_of("<f8", false, "(2,)"), text_of(f8))), spec_of(at::kFloat, {2}))
          .equal(f8.to(at::kFloat)));
  EXPECT_THROW(NpyDecoder({}, ""), Error);
}

}  // namespace
}  // namespace ferry
