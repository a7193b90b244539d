// Writes the fuzz targets' seed corpora: a few valid inputs per target, made with ferry's own
// writers (TarWriter, encode_npy, IndexedDatasetWriter, JpegEncoder, PipelineState::to_json), so no
// binary file is committed and the seeds follow the formats as ferry writes them. The build runs it
// (tests/fuzz/CMakeLists.txt); the YAML and JSON seeds that need no writer are copied beside these.
//
//   make_seeds OUT_DIR     writes OUT_DIR/<target>/<name> for every target (folders made as needed)
//
// Decoder targets' seeds end with the field-spec trailer of fuzz_support.h; indexed_dataset's with
// its own (indexed_dataset_fuzz.cpp).

#include <ATen/ATen.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <ferry/io/decoders/jpeg_encoder.h>
#include <ferry/io/decoders/npy_encoder.h>
#include <ferry/io/formats/indexed_dataset_writer.h>
#include <ferry/io/formats/tar_writer.h>
#include <ferry/pipeline/pipeline_state.h>
#include "tests/fuzz/fuzz_support.h"
#include "tests/support/temp_dir.h"

namespace {

using ferry::FieldSpec;
using ferry::kVariableLength;

std::string out_dir;

std::string text_of(const at::Tensor& bytes) {
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("make_seeds: cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string folder = out_dir + "/" + target;
  ::mkdir(out_dir.c_str(), 0755);
  ::mkdir(folder.c_str(), 0755);
  ferry::fuzz::write_file(folder + "/" + name, bytes);
}

// A decoder target's seed: the encoded field, then the trailer that names its field.
void write_decoder_seed(const std::string& target, const std::string& name, const std::string& file,
                        const FieldSpec& spec, uint8_t extra_bits = 0, uint16_t extra_value = 0) {
  const ferry::fuzz::SpecBytes trailer = ferry::fuzz::spec_bytes(spec, extra_bits, extra_value);
  write_seed(target, name, file + std::string(trailer.begin(), trailer.end()));
}

FieldSpec spec(at::ScalarType dtype, std::vector<int64_t> shape, std::optional<int64_t> max_length = std::nullopt) {
  return FieldSpec{"x", dtype, std::move(shape), max_length};
}

// Random values of every kind a dtype has (negative, fractional), not zeros.
at::Tensor values(at::ScalarType dtype, std::vector<int64_t> shape) {
  if (dtype == at::kBool) return at::randint(0, 2, shape).to(at::kBool);
  if (at::isFloatingType(dtype)) return (at::randn(shape, at::kDouble) * 100).to(dtype);
  return at::randint(dtype == at::kByte ? 0 : -100, 100, shape).to(dtype);
}

void tar_seeds() {
  // WebDataset samples of image + label + json, in each long-name dialect, one with a directory
  // member, a pax global header and a metadata member, one with base-256 sizes.
  const std::string jpeg = text_of(ferry::JpegEncoder().encode(at::randint(0, 256, {8, 8, 3}).to(at::kByte)));
  ferry::TarWriter gnu(ferry::TarLongNames::kGnu);
  for (int i = 0; i < 3; ++i) {
    const std::string key = "sample" + std::to_string(i);
    gnu.add(key + ".jpg", jpeg);
    gnu.add(key + ".cls", std::to_string(i));
    gnu.add(key + ".json", "[" + std::to_string(i) + ", 2.5]");
  }
  gnu.add(std::string(120, 'd') + "/long.txt", "a name past 100 bytes");
  write_seed("tar_index", "gnu.tar", gnu.finish());

  ferry::TarWriter pax(ferry::TarLongNames::kPax);
  pax.add_pax_global({{"comment", "made by make_seeds"}});
  pax.add("__meta__.json", "{}");
  pax.add("dir", "", '5');
  pax.add_pax_local({{"path", "dir/" + std::string(110, 'p') + ".seg.png"}});
  pax.add("placeholder", "pixels");
  pax.add("dir/b.cls", "7\n");
  write_seed("tar_index", "pax.tar", pax.finish());

  ferry::TarWriter ustar(ferry::TarLongNames::kUstarPrefix);
  ustar.set_base256_sizes(true);
  ustar.add(std::string(60, 'u') + "/" + std::string(60, 'v') + "/000001.txt", "hello");
  ustar.add(std::string(60, 'u') + "/" + std::string(60, 'v') + "/000001.cls", "1");
  write_seed("tar_index", "ustar.tar", ustar.finish());
}

void npy_seeds() {
  struct Case {
    const char* name;
    at::Tensor array;
    ferry::NpyEncodeOptions options;
    FieldSpec field;
  };
  const Case cases[] = {
      {"u1_4x3.npy", values(at::kByte, {4, 3}), {}, spec(at::kByte, {4, 3})},
      {"i2_var.npy", values(at::kShort, {5}), {}, spec(at::kInt, {kVariableLength}, 16)},
      {"f4_fortran.npy", values(at::kFloat, {2, 3}), {.fortran_order = true}, spec(at::kFloat, {2, 3})},
      {"f2_scalar.npy", values(at::kHalf, {}), {}, spec(at::kFloat, {})},
      {"u2.npy", at::randint(0, 65536, {6}).to(at::kInt), {.store_unsigned = true}, spec(at::kInt, {6})},
      {"u4_2x2x2.npy", at::randint(0, 1LL << 32, {2, 2, 2}), {.store_unsigned = true}, spec(at::kLong, {2, 2, 2})},
      {"b1.npy", values(at::kBool, {3}), {}, spec(at::kBool, {3})},
      {"f8_empty.npy", values(at::kDouble, {0, 2}), {}, spec(at::kDouble, {kVariableLength, 2})},
      {"i8_1x2x1x2.npy", values(at::kLong, {1, 2, 1, 2}), {}, spec(at::kLong, {1, 2, 1, 2})},
  };
  for (const Case& c : cases) {
    write_decoder_seed("npy_decoder", c.name, text_of(ferry::encode_npy(c.array, c.options)), c.field);
  }
  // float64 read as float32 only with Cast::kAny (trailer bit 5).
  write_decoder_seed("npy_decoder", "f8_cast.npy", text_of(ferry::encode_npy(values(at::kDouble, {3}))),
                     spec(at::kFloat, {3}), /*extra_bits=*/1);
}

void indexed_dataset_seeds() {
  const ferry::testing::TempDir dir("ferry_fuzz_seeds");
  // Trailer: the .idx's length, seq_len, add_extra_token (indexed_dataset_fuzz.cpp).
  // `modes` is appended to the .idx; a `dtype` code replaces the one at byte 17.
  const auto write = [&](const std::string& name, const std::string& prefix, uint16_t seq_len, bool extra,
                         const std::string& modes, char dtype = 0) {
    std::string idx = read_file(prefix + ".idx") + modes;
    if (dtype != 0) idx[17] = dtype;
    const size_t n = idx.size();
    const std::string trailer{static_cast<char>(n & 0xFF),         static_cast<char>((n >> 8) & 0xFF),
                              static_cast<char>((n >> 16) & 0xFF), static_cast<char>((n >> 24) & 0xFF),
                              static_cast<char>(seq_len & 0xFF),   static_cast<char>(seq_len >> 8),
                              static_cast<char>(extra ? 1 : 0),    '\0'};
    write_seed("indexed_dataset", name, idx + read_file(prefix + ".bin") + trailer);
  };
  {
    ferry::IndexedDatasetWriter writer(dir / "u16", ferry::IndexedDtype::kUInt16);
    writer.add_document(std::vector<int64_t>{1, 2, 3, 65535});
    writer.add_document(std::vector<int64_t>{});  // an empty document
    writer.add_document(std::vector<int64_t>{7, 8, 9, 10, 11}, std::vector<int64_t>{2, 0, 3});
    writer.finalize();
    write("uint16", dir / "u16", 3, true, "");
  }
  {
    ferry::IndexedDatasetWriter writer(dir / "i32", ferry::IndexedDtype::kInt32);
    for (int64_t d = 0; d < 5; ++d) writer.add_document(std::vector<int64_t>{d, -d, 1000 * d});
    writer.finalize();
    write("int32", dir / "i32", 4, false, "");
    // Megatron's multimodal index: one int8 mode per sequence after the document indices.
    write("int32_modes", dir / "i32", 4, true, std::string{0, 1, 0, 1, 2});
    // The same bytes as float32 tokens (code 7), which ferry's writer does not write and
    // TokenWindowSource refuses.
    write("float32", dir / "i32", 1, true, "", static_cast<char>(ferry::IndexedDtype::kFloat32));
  }
}

void json_seeds() {
  write_decoder_seed("json_decoder", "matrix.json", "[[1, 2, 3], [4, 5, 6]]", spec(at::kInt, {2, 3}));
  write_decoder_seed("json_decoder", "floats.json", "[1.5, -2e-3, 0, 3.4028234663852886e38]",
                     spec(at::kFloat, {kVariableLength}, 8));
  write_decoder_seed("json_decoder", "scalar.json", " 9007199254740993\n", spec(at::kLong, {}));
  write_decoder_seed("json_decoder", "empty.json", "[]", spec(at::kInt, {kVariableLength, 4}));
  write_decoder_seed("json_decoder", "bools.json", "[true, false, 1]", spec(at::kBool, {3}));
  write_decoder_seed("json_decoder", "half.json", "[0.1, 65504, -6e-8]", spec(at::kHalf, {3}));
  write_decoder_seed("json_decoder", "bfloat16.json", "[[1e38], [-1]]", spec(at::kBFloat16, {2, 1}));
  write_decoder_seed("json_decoder", "bytes.json", "[[[0, 255]]]", spec(at::kByte, {1, 1, 2}));
}

void label_seeds() {
  write_decoder_seed("label_decoder", "int64.cls", "17\n", spec(at::kLong, {}));
  write_decoder_seed("label_decoder", "int32.cls", " -3 ", spec(at::kInt, {1}));
  write_decoder_seed("label_decoder", "uint8.cls", "+255", spec(at::kByte, {}));
  write_decoder_seed("label_decoder", "int16.cls", "-32768", spec(at::kShort, {}));
}

void jpeg_seeds() {
  using ferry::JpegSubsampling;
  const at::Tensor image = at::randint(0, 256, {24, 32, 3}).to(at::kByte);
  const auto jpeg = [&](JpegSubsampling subsampling, const at::Tensor& pixels) {
    return text_of(ferry::JpegEncoder({.quality = 75, .subsampling = subsampling}).encode(pixels));
  };
  // Trailer bits 5-7: resize, crop, random crop; extra_value: resize_shorter and seed.
  write_decoder_seed("jpeg_decoder", "rgb420.jpg", jpeg(JpegSubsampling::k420, image), spec(at::kByte, {24, 32, 3}));
  write_decoder_seed("jpeg_decoder", "rgb444_crop.jpg", jpeg(JpegSubsampling::k444, image),
                     spec(at::kByte, {16, 16, 3}), /*crop*/ 2);
  write_decoder_seed("jpeg_decoder", "rgb422_resize_crop.jpg", jpeg(JpegSubsampling::k422, image),
                     spec(at::kByte, {8, 8, 3}), /*resize + crop*/ 3, /*resize_shorter*/ 12);
  write_decoder_seed("jpeg_decoder", "gray_random_crop.jpg",
                     jpeg(JpegSubsampling::kGray, image.narrow(2, 0, 1).contiguous()), spec(at::kByte, {20, 20, 3}),
                     /*crop, random*/ 6, /*seed*/ 5);
  write_decoder_seed("jpeg_decoder", "shrink.jpg",
                     jpeg(JpegSubsampling::k420, at::randint(0, 256, {64, 80, 3}).to(at::kByte)),
                     spec(at::kByte, {6, 6, 3}), /*resize + crop*/ 3, /*resize_shorter*/ 7);
}

void pipeline_state_seeds() {
  ferry::PipelineState state;
  write_seed("pipeline_state", "start.json", state.to_json());
  state.next_batch = 17;
  state.next = ferry::BatchCursor{1, 2, 14};
  state.last_epoch = 1;
  state.last_index = 1;
  state.order = {{"batch_size", "7"},
                 {"sampler.seed", "3"},
                 {"sampler.shuffle", "true"},
                 {"source.fields", "x:uint8[4]"},
                 {"source.samples", "100"}};
  write_seed("pipeline_state", "mid_run.json", state.to_json());
  state.next_batch = 45;
  state.next = ferry::BatchCursor{3, 0, 0};
  state.order = {{"quote\"and\\slash", "tab\there"}};
  write_seed("pipeline_state", "finished.json", state.to_json());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR\n");
    return 2;
  }
  out_dir = argv[1];
  at::manual_seed(13);  // the same seeds on every build
  try {
    tar_seeds();
    npy_seeds();
    indexed_dataset_seeds();
    json_seeds();
    label_seeds();
    jpeg_seeds();
    pipeline_state_seeds();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
