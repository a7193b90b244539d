// PngDecoder and ImageDecoder: every PNG colour type and bit depth, interlaced or not, decoded to the
// RGB that PIL's convert("RGB") makes of it; resize and crop as for JPEGs; damaged files refused.
#include <ferry/io/decoders/png_decoder.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/io/decoders/image_decoder.h>
#include <ferry/io/decoders/jpeg_decoder.h>
#include <ferry/io/decoders/jpeg_encoder.h>
#include <ferry/pipeline/error.h>
#include "tests/support/error_text.h"
#include "tests/support/image_checks.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;
using testing::max_abs_diff;
using testing::test_image;

using Crop = ImageDecodeOptions::Crop;

FieldSpec image_spec(int64_t height, int64_t width) {
  return FieldSpec{"image", at::kByte, {height, width, 3}, std::nullopt, "png"};
}

// What a test PNG holds: width x height samples of `channels` values each (in the file's bit depth),
// with a palette for PNG_COLOR_TYPE_PALETTE, and the RGB a reader must make of it.
struct TestPng {
  int width = 0, height = 0, color_type = 0, bit_depth = 8;
  bool interlaced = false;
  std::vector<uint16_t> samples;      // row-major, channels per pixel
  std::vector<png_color> palette;     // color type PALETTE
  std::vector<uint8_t> transparency;  // tRNS alpha per palette entry (ignored by readers of RGB)
  at::Tensor expected;                // uint8 [height, width, 3]
};

int channels_of(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY: return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    default: return 1;  // palette indices
  }
}

// Random content, and the RGB PIL's Image.convert("RGB") gives: gray repeated, 16-bit cut to the high
// byte, gray below 8 bits scaled to 0..255, palette entries looked up, alpha dropped.
TestPng random_png(std::mt19937_64& rng, int color_type, int bit_depth, bool interlaced) {
  TestPng png;
  png.width = 1 + static_cast<int>(rng() % 40);
  png.height = 1 + static_cast<int>(rng() % 30);
  png.color_type = color_type;
  png.bit_depth = bit_depth;
  png.interlaced = interlaced;
  const int channels = channels_of(color_type);
  const uint32_t top = (1u << bit_depth) - 1;
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    png.palette.resize(1u << bit_depth);
    for (png_color& entry : png.palette) entry = {uint8_t(rng()), uint8_t(rng()), uint8_t(rng())};
    png.transparency.resize(png.palette.size());
    for (uint8_t& alpha : png.transparency) alpha = uint8_t(rng());
  }
  png.samples.resize(static_cast<size_t>(png.width * png.height * channels));
  for (uint16_t& sample : png.samples) sample = static_cast<uint16_t>(rng() % (top + 1));
  png.expected = at::empty({png.height, png.width, 3}, at::kByte);
  uint8_t* out = png.expected.data_ptr<uint8_t>();
  const auto eight_bits = [&](uint16_t value) -> uint8_t {
    if (bit_depth == 16) return static_cast<uint8_t>(value >> 8);
    return static_cast<uint8_t>(value * 255 / top);
  };
  for (size_t pixel = 0; pixel < static_cast<size_t>(png.width * png.height); ++pixel) {
    const uint16_t* s = &png.samples[pixel * static_cast<size_t>(channels)];
    if (color_type == PNG_COLOR_TYPE_PALETTE) {
      const png_color& entry = png.palette[s[0]];
      out[0] = entry.red, out[1] = entry.green, out[2] = entry.blue;
    } else if (channels <= 2) {
      out[0] = out[1] = out[2] = eight_bits(s[0]);
    } else {
      for (int c = 0; c < 3; ++c) out[c] = eight_bits(s[c]);
    }
    out += 3;
  }
  return png;
}

[[noreturn]] void on_write_error(png_structp png, png_const_charp message) {
  ADD_FAILURE() << "libpng could not write the test image: " << message;
  png_longjmp(png, 1);
}

void on_write(png_structp png, png_bytep data, png_size_t size) {
  auto* out = static_cast<std::string*>(png_get_io_ptr(png));
  out->append(reinterpret_cast<const char*>(data), size);
}

// The file's bytes, written with libpng.
std::string write_png(const TestPng& image) {
  std::string bytes;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, on_write_error, nullptr);
  png_infop info = png_create_info_struct(png);
  const int channels = channels_of(image.color_type);
  const size_t row_bytes = (static_cast<size_t>(image.width * channels * image.bit_depth) + 7) / 8;
  std::vector<std::vector<uint8_t>> rows(static_cast<size_t>(image.height), std::vector<uint8_t>(row_bytes, 0));
  for (int y = 0; y < image.height; ++y) {
    for (int i = 0; i < image.width * channels; ++i) {
      const uint16_t value = image.samples[static_cast<size_t>(y * image.width * channels + i)];
      std::vector<uint8_t>& row = rows[static_cast<size_t>(y)];
      if (image.bit_depth == 16) {
        row[2 * i] = static_cast<uint8_t>(value >> 8);
        row[2 * i + 1] = static_cast<uint8_t>(value);
      } else if (image.bit_depth == 8) {
        row[i] = static_cast<uint8_t>(value);
      } else {  // packed, most significant bits first
        const int bit = i * image.bit_depth;
        row[bit / 8] |= static_cast<uint8_t>(value << (8 - image.bit_depth - bit % 8));
      }
    }
  }
  std::vector<png_bytep> pointers;
  for (auto& row : rows) pointers.push_back(row.data());
  if (setjmp(png_jmpbuf(png)) == 0) {
    png_set_write_fn(png, &bytes, on_write, nullptr);
    png_set_IHDR(png, info, image.width, image.height, image.bit_depth, image.color_type,
                 image.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (!image.palette.empty()) {
      png_set_PLTE(png, info, image.palette.data(), static_cast<int>(image.palette.size()));
      png_set_tRNS(png, info, image.transparency.data(), static_cast<int>(image.transparency.size()), nullptr);
    }
    png_write_info(png, info);
    png_write_image(png, pointers.data());
    png_write_end(png, nullptr);
  }
  png_destroy_write_struct(&png, &info);
  return bytes;
}

// A PNG of its header (signature and IHDR) and the start of an IDAT chunk (all that libpng reads
// before the pixels), for sizes too large to write whole.
std::string header_only_png(uint32_t width, uint32_t height) {
  std::string bytes;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, on_write_error, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png)) == 0) {
    png_set_write_fn(png, &bytes, on_write, nullptr);
    png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
  }
  png_destroy_write_struct(&png, &info);
  bytes += std::string("\0\0\0\x10IDAT", 8) + std::string(20, '\0');  // 16 bytes of data and a CRC
  return bytes;
}

at::Tensor tensor_of(const std::string& bytes) {
  at::Tensor out = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(out.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  return out;
}

TEST(PngDecoder, DecodesEveryColourTypeAndBitDepthAsPilsRgb) {
  std::mt19937_64 rng(20261126);
  const std::vector<std::pair<int, std::vector<int>>> kinds = {{PNG_COLOR_TYPE_GRAY, {1, 2, 4, 8, 16}},
                                                               {PNG_COLOR_TYPE_GRAY_ALPHA, {8, 16}},
                                                               {PNG_COLOR_TYPE_RGB, {8, 16}},
                                                               {PNG_COLOR_TYPE_RGB_ALPHA, {8, 16}},
                                                               {PNG_COLOR_TYPE_PALETTE, {1, 2, 4, 8}}};
  int checked = 0;
  for (const auto& [color_type, depths] : kinds) {
    for (const int depth : depths) {
      for (const bool interlaced : {false, true}) {
        for (int round = 0; round < 3; ++round) {
          const TestPng png = random_png(rng, color_type, depth, interlaced);
          SCOPED_TRACE("color type " + std::to_string(color_type) + ", " + std::to_string(depth) + " bits" +
                       (interlaced ? ", interlaced" : "") + ", " + std::to_string(png.width) + "x" +
                       std::to_string(png.height));
          const std::string bytes = write_png(png);
          const at::Tensor decoded = PngDecoder().decode(tensor_of(bytes), image_spec(png.height, png.width));
          ASSERT_EQ(decoded.sizes(), png.expected.sizes());
          EXPECT_TRUE(decoded.equal(png.expected)) << "pixels differ";
          EXPECT_TRUE(ImageDecoder().decode(tensor_of(bytes), image_spec(png.height, png.width)).equal(png.expected));
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 15 * 2 * 3);  // 15 (colour type, bit depth) pairs
}

TEST(PngDecoder, ResizesAndCropsAsTheJpegDecoderDoes) {
  // An RGB PNG of a photo-like image, resized (antialiased, as Pillow resizes) and cropped.
  TestPng png;
  png.width = 120, png.height = 90, png.color_type = PNG_COLOR_TYPE_RGB;
  const at::Tensor image = test_image(90, 120, 3, 5);
  png.samples.assign(image.data_ptr<uint8_t>(), image.data_ptr<uint8_t>() + image.numel());
  const at::Tensor bytes = tensor_of(write_png(png));
  const at::Tensor resized = testing::reference_resample(image, 64, 85);
  EXPECT_LE(max_abs_diff(PngDecoder({.resize_shorter = 64}).decode(bytes, image_spec(64, 85)), resized), 1.0);
  const at::Tensor cropped =
      PngDecoder({.resize_shorter = 64, .crop_height = 48, .crop_width = 48}).decode(bytes, image_spec(48, 48));
  EXPECT_LE(max_abs_diff(cropped, resized.slice(0, 8, 56).slice(1, 18, 66)), 1.0);
  EXPECT_TRUE(PngDecoder({.crop_height = 30, .crop_width = 40})
                  .decode(bytes, image_spec(30, 40))
                  .equal(image.slice(0, 30, 60).slice(1, 40, 80)));
  // A large shrink (here 3.6x) is antialiased too: the filter widens with the shrink.
  TestPng big;
  big.width = 480, big.height = 360, big.color_type = PNG_COLOR_TYPE_RGB;
  const at::Tensor large = test_image(360, 480, 3, 7, 0);
  big.samples.assign(large.data_ptr<uint8_t>(), large.data_ptr<uint8_t>() + large.numel());
  const at::Tensor shrunk = PngDecoder({.resize_shorter = 100}).decode(tensor_of(write_png(big)), image_spec(100, 133));
  EXPECT_LE(max_abs_diff(shrunk, testing::reference_resample(large, 100, 133)), 1.0);
  EXPECT_LE(
      max_abs_diff(PngDecoder({.resize_shorter = 100, .interpolation = ImageDecodeOptions::Interpolation::kBicubic})
                       .decode(tensor_of(write_png(big)), image_spec(100, 133)),
                   testing::reference_resample(large, 100, 133, /*bicubic=*/true)),
      1.0);
  // A random crop is drawn as for JPEGs: from the seed and, in a pipeline, the epoch and sample.
  const ImageDecodeOptions random{
      .resize_shorter = 64, .crop_height = 40, .crop_width = 40, .crop = Crop::kRandom, .seed = 3};
  std::set<std::string> crops;
  for (uint64_t epoch = 0; epoch < 8; ++epoch) {
    const DecodeContext context{epoch, 17};
    const at::Tensor crop = PngDecoder(random).decode_sample(bytes, image_spec(40, 40), context);
    EXPECT_TRUE(crop.equal(PngDecoder(random).decode_sample(bytes.clone(), image_spec(40, 40), context)));
    crops.insert(std::string(reinterpret_cast<const char*>(crop.data_ptr<uint8_t>()), crop.numel()));
  }
  EXPECT_GE(crops.size(), 5u) << "8 epochs gave " << crops.size() << " different crops";
}

TEST(PngDecoder, RefusesDamagedFilesNamingWhat) {
  std::mt19937_64 rng(9);
  const TestPng shape = random_png(rng, PNG_COLOR_TYPE_RGB, 8, false);
  const std::string bytes = write_png(shape);
  const FieldSpec spec = image_spec(shape.height, shape.width);
  const PngDecoder decoder;
  EXPECT_TRUE(
      contains(error_of([&] { decoder.decode(tensor_of(bytes.substr(0, bytes.size() / 2)), spec); }), "corrupt PNG"));
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x5A;  // inside the image data: a CRC or zlib error
  EXPECT_TRUE(contains(error_of([&] { decoder.decode(tensor_of(flipped), spec); }), "corrupt PNG"));
  EXPECT_TRUE(contains(error_of([&] { decoder.decode(tensor_of("GIF89a, not a png"), spec); }), "not a PNG"));
  EXPECT_TRUE(contains(error_of([&] { decoder.decode(at::empty({0}, at::kByte), spec); }), "empty PNG"));
  EXPECT_TRUE(contains(error_of([&] { decoder.decode(tensor_of(bytes), image_spec(7, 9)); }), "the field declares"));
  // A small file whose header claims 20000 x 20000 pixels (1.2 GB as RGB) is refused before any
  // pixel memory is allocated, even where resizing would make it fit the field.
  const PngDecoder resizing({.resize_shorter = 64, .crop_height = 64, .crop_width = 64});
  const std::string huge = header_only_png(20000, 20000);
  EXPECT_LT(huge.size(), 100u);
  const std::string too_large = error_of([&] { resizing.decode(tensor_of(huge), image_spec(64, 64)); });
  EXPECT_TRUE(contains(too_large, "PNG of 20000 x 20000 pixels (400000000) is larger than ferry decodes")) << too_large;
  EXPECT_TRUE(contains(error_of([&] { resizing.decode(tensor_of(header_only_png(600, 400)), image_spec(64, 64)); }),
                       "corrupt PNG"));  // a size it decodes, but no image data
  // A good file decodes after the bad ones, on the same thread.
  EXPECT_TRUE(decoder.decode(tensor_of(bytes), spec).equal(shape.expected));
}

// PNG's CRC-32 of `bytes` (the chunk's type and data).
uint32_t png_crc(std::string_view bytes) {
  uint32_t crc = 0xffffffffu;
  for (const char c : bytes) {
    crc ^= static_cast<uint8_t>(c);
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

std::string big_endian(uint32_t value) {
  return {static_cast<char>(value >> 24), static_cast<char>(value >> 16), static_cast<char>(value >> 8),
          static_cast<char>(value)};
}

// A chunk of `type` holding `data`, its CRC right unless `bad_crc`.
std::string png_chunk(const std::string& type, const std::string& data, bool bad_crc = false) {
  return big_endian(static_cast<uint32_t>(data.size())) + type + data +
         big_endian(png_crc(type + data) ^ (bad_crc ? 1u : 0u));
}

// Where the chunk of `type` starts in `png` (its length field).
size_t chunk_at(const std::string& png, const std::string& type) { return png.find(type) - 4; }

TEST(PngDecoder, RefusesDamageThatLibpngOnlyWarnsAboutSoThatSkipCanSkipIt) {
  std::mt19937_64 rng(21);
  const PngDecoder decoder;

  // Palette indices past the palette: written with 256 entries, then given a palette of 4 (libpng
  // refuses to write such a file).
  TestPng indexed = random_png(rng, PNG_COLOR_TYPE_PALETTE, 8, false);
  for (uint16_t& sample : indexed.samples) sample = 200;
  std::string past_palette = write_png(indexed);
  const size_t trns = chunk_at(past_palette, "tRNS");
  past_palette.erase(trns, 12 + indexed.transparency.size());
  const size_t plte = chunk_at(past_palette, "PLTE");
  past_palette.replace(plte, 12 + 3 * indexed.palette.size(), png_chunk("PLTE", std::string(12, '\x40')));
  const std::string past =
      error_of([&] { decoder.decode(tensor_of(past_palette), image_spec(indexed.height, indexed.width)); });
  EXPECT_TRUE(contains(past, "corrupt PNG") && contains(past, "palette index")) << past;

  const TestPng shape = random_png(rng, PNG_COLOR_TYPE_RGB, 8, false);
  const std::string good = write_png(shape);
  const FieldSpec spec = image_spec(shape.height, shape.width);
  const size_t idat = chunk_at(good, "IDAT");
  const size_t iend = chunk_at(good, "IEND");

  // The image data twice: a file written over itself, or two files run together.
  const std::string twice = good.substr(0, iend) + good.substr(idat, iend - idat) + good.substr(iend);
  const std::string doubled = error_of([&] { decoder.decode(tensor_of(twice), spec); });
  EXPECT_TRUE(contains(doubled, "corrupt PNG")) << doubled;

  // A bad checksum on an ancillary chunk (a text chunk before the image data and after it).
  for (const size_t at : {idat, iend}) {
    const std::string bad =
        good.substr(0, at) + png_chunk("tEXt", std::string("Comment\0damaged", 15), true) + good.substr(at);
    const std::string crc = error_of([&] { decoder.decode(tensor_of(bad), spec); });
    EXPECT_TRUE(contains(crc, "corrupt PNG") && contains(crc, "CRC")) << crc;
    // With a right checksum the same chunk is fine.
    const std::string fine =
        good.substr(0, at) + png_chunk("tEXt", std::string("Comment\0damaged", 15)) + good.substr(at);
    EXPECT_TRUE(decoder.decode(tensor_of(fine), spec).equal(shape.expected));
  }
  EXPECT_TRUE(decoder.decode(tensor_of(good), spec).equal(shape.expected));
}

TEST(ImageDecoder, DecodesEachFileWithItsFormatsDecoder) {
  const at::Tensor picture = test_image(48, 64, 3, 11);
  const at::Tensor jpeg = JpegEncoder({.quality = 90}).encode(picture);
  TestPng png;
  png.width = 64, png.height = 48, png.color_type = PNG_COLOR_TYPE_RGB;
  png.samples.assign(picture.data_ptr<uint8_t>(), picture.data_ptr<uint8_t>() + picture.numel());
  const at::Tensor png_bytes = tensor_of(write_png(png));
  const ImageDecodeOptions options{.resize_shorter = 40, .crop_height = 32, .crop_width = 32};
  const FieldSpec spec = image_spec(32, 32);
  const ImageDecoder image(options);
  EXPECT_TRUE(image.decode(jpeg, spec).equal(JpegDecoder(options).decode(jpeg, spec)));
  EXPECT_TRUE(image.decode(png_bytes, spec).equal(PngDecoder(options).decode(png_bytes, spec)));
  const std::string error = error_of([&] { image.decode(tensor_of("BM6 a bitmap"), spec); });
  EXPECT_TRUE(contains(error, "not a JPEG, PNG or WebP file")) << error;
  EXPECT_TRUE(contains(error, "42 4d 36")) << error;  // "BM6": what the bytes start with
  // Both are built in.
  EXPECT_EQ(DecoderRegistry::global().find("png")->name(), "png");
  EXPECT_EQ(DecoderRegistry::global().find("image")->name(), "image");
}

}  // namespace
}  // namespace ferry
