#include <ferry/io/decoders/jpeg_decoder.h>

#include <ATen/ATen.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/io/decoders/jpeg_encoder.h>
#include <ferry/pipeline/error.h>
#include "tests/support/error_text.h"
#include "tests/support/image_checks.h"
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;
using testing::max_abs_diff;
using testing::mean_abs_diff;
using testing::test_image;

using Crop = JpegDecodeOptions::Crop;

FieldSpec image_spec(int64_t height, int64_t width) {
  return FieldSpec{"image", at::kByte, {height, width, 3}, std::nullopt, "jpeg"};
}

// An HWC image with 3 (RGB), 1 (gray) or 4 (CMYK) channels as JPEG bytes, at the test's defaults.
at::Tensor encode(const at::Tensor& image, int quality = 95, JpegSubsampling subsampling = JpegSubsampling::k420) {
  return JpegEncoder({.quality = quality, .subsampling = subsampling}).encode(image);
}

const char* subsampling_name(JpegSubsampling subsampling) {
  return subsampling == JpegSubsampling::k444 ? "4:4:4" : subsampling == JpegSubsampling::k420 ? "4:2:0" : "other";
}

TEST(JpegDecoder, DecodesRgbImagesCloseToTheOriginal) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 8; ++round) {
    const int64_t height = 8 + static_cast<int64_t>(rng() % 120), width = 8 + static_cast<int64_t>(rng() % 160);
    const JpegSubsampling subsampling = round % 2 ? JpegSubsampling::k444 : JpegSubsampling::k420;
    const at::Tensor original = test_image(height, width, 3, rng());
    const at::Tensor decoded = JpegDecoder().decode(encode(original, 95, subsampling), image_spec(height, width));
    ASSERT_EQ(decoded.sizes(), original.sizes());
    EXPECT_EQ(decoded.scalar_type(), at::kByte);
    EXPECT_TRUE(decoded.is_contiguous());
    EXPECT_LT(mean_abs_diff(decoded, original), 4.0)
        << height << "x" << width << " subsampling " << subsampling_name(subsampling);
  }
}

TEST(JpegDecoder, TurnsGrayscaleIntoThreeEqualChannels) {
  const at::Tensor gray = test_image(37, 53, 1, 3);
  const at::Tensor decoded = JpegDecoder().decode(encode(gray), image_spec(37, 53));
  ASSERT_EQ(decoded.sizes(), (std::vector<int64_t>{37, 53, 3}));
  EXPECT_TRUE(decoded.select(2, 0).equal(decoded.select(2, 1)));
  EXPECT_TRUE(decoded.select(2, 0).equal(decoded.select(2, 2)));
  EXPECT_LT(mean_abs_diff(decoded.select(2, 0), gray.select(2, 0)), 3.0);
}

TEST(JpegDecoder, ResizesTheShorterSideThenCropsTheCentre) {
  // 90x120 resized to a shorter side of 64 is 64x85 (85 = floor(64 * 120 / 90)), antialiased from the
  // full-size decode as Pillow resizes: the reference computed from that decode.
  const at::Tensor bytes = encode(test_image(90, 120, 3, 5));
  const at::Tensor full = JpegDecoder().decode(bytes, image_spec(90, 120));
  const at::Tensor resized = testing::reference_resample(full, 64, 85);

  const at::Tensor only_resized = JpegDecoder({.resize_shorter = 64}).decode(bytes, image_spec(64, 85));
  EXPECT_LE(max_abs_diff(only_resized, resized), 1.0);

  const at::Tensor cropped =
      JpegDecoder({.resize_shorter = 64, .crop_height = 48, .crop_width = 48}).decode(bytes, image_spec(48, 48));
  ASSERT_EQ(cropped.sizes(), (std::vector<int64_t>{48, 48, 3}));
  // torchvision's offsets: round((64-48)/2) = 8, round((85-48)/2) = round(18.5) = 18 (ties to even)
  EXPECT_LE(max_abs_diff(cropped, resized.slice(0, 8, 56).slice(1, 18, 66)), 1.0);

  // A crop without a resize is a plain window of the decoded image; a portrait image is resized on its width.
  const at::Tensor window = JpegDecoder({.crop_height = 30, .crop_width = 40}).decode(bytes, image_spec(30, 40));
  EXPECT_TRUE(window.equal(full.slice(0, 30, 60).slice(1, 40, 80)));
  const at::Tensor portrait = encode(test_image(100, 60, 3, 6));
  EXPECT_EQ(JpegDecoder({.resize_shorter = 45}).decode(portrait, image_spec(75, 45)).sizes(),
            (std::vector<int64_t>{75, 45, 3}));
}

TEST(JpegDecoder, CentreCropLandsOnTheMiddleOfAKnownPattern) {
  // A gray image with a red square in its exact middle: after an upscale and a centre crop that is
  // just the square's size, the crop is red all over but for a thin rim where the square's edges
  // are blurred.
  at::Tensor pattern = at::full({64, 96, 3}, 128, at::kByte);
  pattern.slice(0, 24, 40).slice(1, 40, 56).select(2, 0).fill_(250);
  pattern.slice(0, 24, 40).slice(1, 40, 56).select(2, 1).fill_(10);
  pattern.slice(0, 24, 40).slice(1, 40, 56).select(2, 2).fill_(10);
  const at::Tensor out = JpegDecoder({.resize_shorter = 128, .crop_height = 32, .crop_width = 32})
                             .decode(encode(pattern, 95, JpegSubsampling::k444), image_spec(32, 32));
  const at::Tensor inner = out.slice(0, 3, 29).slice(1, 3, 29).to(at::kInt);
  EXPECT_GT(inner.select(2, 0).min().item<int>(), 200);
  EXPECT_LT(inner.select(2, 1).max().item<int>(), 60);
}

TEST(JpegDecoder, ShrinksLargeImagesInTheDctDomainFirstOnlyWhenAsked) {
  // 480x640 to a shorter side of 100: by default the full decode, antialiased as Pillow resizes it.
  const at::Tensor bytes = encode(test_image(480, 640, 3, 9, 2));
  const at::Tensor full = JpegDecoder().decode(bytes, image_spec(480, 640));
  const at::Tensor reference = testing::reference_resample(full, 100, 133);
  EXPECT_LE(max_abs_diff(JpegDecoder({.resize_shorter = 100}).decode(bytes, image_spec(100, 133)), reference), 1.0);
  // With dct_scaling, decoded at 1/4 (120x160) by TurboJPEG first: an area average, close to it.
  const at::Tensor fast = JpegDecoder({.resize_shorter = 100, .dct_scaling = true}).decode(bytes, image_spec(100, 133));
  EXPECT_LT(mean_abs_diff(fast, reference), 3.0);
  // Shrinking by exactly 1/2 is the DCT's alone.
  EXPECT_EQ(JpegDecoder({.resize_shorter = 240, .dct_scaling = true}).decode(bytes, image_spec(240, 320)).sizes(),
            (std::vector<int64_t>{240, 320, 3}));
}

TEST(JpegDecoder, RandomCropDependsOnlyOnTheSeedAndTheBytes) {
  const auto crop_of = [](const at::Tensor& bytes, uint64_t seed) {
    return JpegDecoder({.resize_shorter = 64, .crop_height = 40, .crop_width = 40, .crop = Crop::kRandom, .seed = seed})
        .decode(bytes, image_spec(40, 40));
  };
  // Every random crop is exactly a window of the resized image; this finds where (top * 1000 + left).
  const auto offset_of = [](const at::Tensor& bytes, const at::Tensor& crop) {
    const at::Tensor resized = JpegDecoder({.resize_shorter = 64}).decode(bytes, image_spec(64, 85));
    for (int64_t top = 0; top <= 64 - 40; ++top) {
      for (int64_t left = 0; left <= 85 - 40; ++left) {
        if (resized.slice(0, top, top + 40).slice(1, left, left + 40).equal(crop)) return top * 1000 + left;
      }
    }
    ADD_FAILURE() << "the random crop is no window of the resized image";
    return int64_t{-1};
  };
  const at::Tensor bytes = encode(test_image(90, 120, 3, 21));
  // The same picture encoded at another quality: other bytes, so (mostly) other crops.
  const at::Tensor other = encode(test_image(90, 120, 3, 21), 90);
  std::set<int64_t> offsets;
  int moved = 0;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    const at::Tensor crop = crop_of(bytes, seed);
    EXPECT_TRUE(crop.equal(crop_of(bytes.clone(), seed))) << "seed " << seed;
    const int64_t offset = offset_of(bytes, crop);
    offsets.insert(offset);
    moved += offset != offset_of(other, crop_of(other, seed));
  }
  EXPECT_GE(offsets.size(), 8u) << "12 seeds gave only " << offsets.size() << " different crops";
  EXPECT_GE(moved, 8) << "other bytes moved the crop for only " << moved << " of 12 seeds";
}

TEST(JpegDecoder, GivesTheSameResultsFromManyThreads) {
  std::vector<at::Tensor> inputs;
  for (uint64_t i = 0; i < 16; ++i) inputs.push_back(encode(test_image(70 + static_cast<int64_t>(i), 90, 3, 100 + i)));
  const JpegDecoder decoder(
      {.resize_shorter = 48, .crop_height = 40, .crop_width = 40, .crop = Crop::kRandom, .seed = 3});
  std::vector<at::Tensor> expected;
  for (const at::Tensor& input : inputs) expected.push_back(decoder.decode(input, image_spec(40, 40)));
  // Bad data that fails in the header, and in the pixels.
  const std::vector<at::Tensor> corrupt{inputs[0].slice(0, 0, 30).clone(),
                                        inputs[0].slice(0, 0, inputs[0].numel() / 2).clone()};
  for (const int threads : {2, 4, 8}) {
    std::vector<int> mismatches(static_cast<size_t>(threads), 0);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int round = 0; round < 4; ++round) {
          for (size_t i = 0; i < inputs.size(); ++i) {
            const size_t k = (i + static_cast<size_t>(t) * 5) % inputs.size();
            // A failure on this thread's handle must leave it fit for the next image.
            try {
              decoder.decode(corrupt[(i + static_cast<size_t>(round)) % 2], image_spec(40, 40));
              ++mismatches[static_cast<size_t>(t)];
            } catch (const Error&) {
            }
            if (!decoder.decode(inputs[k], image_spec(40, 40)).equal(expected[k])) ++mismatches[static_cast<size_t>(t)];
          }
        }
      });
    }
    for (std::thread& worker : workers) worker.join();
    for (int t = 0; t < threads; ++t)
      EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << threads << " threads, thread " << t;
  }
}

// A fresh folder for one test's files, removed at the end.
struct ScratchDir : testing::TempDir {
  ScratchDir() : testing::TempDir("ferry_jpeg_test") {}
};

constexpr const char* kPython = "/usr/bin/python3";

TEST(JpegDecoder, MatchesPillowOnTheSameFile) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " not found: cannot cross-check with Pillow";
  if (std::system((std::string(kPython) + " -c 'import PIL.Image' > /dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << kPython << " has no Pillow (PIL): cannot cross-check";
  }
  const ScratchDir dir;
  for (const JpegSubsampling subsampling : {JpegSubsampling::k420, JpegSubsampling::k444}) {
    const uint64_t seed = subsampling == JpegSubsampling::k420 ? 42 : 40;
    const at::Tensor bytes = encode(test_image(75, 101, 3, seed), 95, subsampling);
    {
      std::ofstream out(dir / "image.jpg", std::ios::binary);
      out.write(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), bytes.numel());
    }
    const std::string command =
        std::string(kPython) +
        " -c 'import sys; from PIL import Image; "
        "open(sys.argv[2], \"wb\").write(Image.open(sys.argv[1]).convert(\"RGB\").tobytes())' " +
        (dir / "image.jpg") + " " + (dir / "image.rgb");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(dir / "image.rgb", std::ios::binary);
    const std::vector<char> pixels((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(pixels.size(), 75u * 101u * 3u);
    const at::Tensor pillow = at::from_blob(const_cast<char*>(pixels.data()), {75, 101, 3}, at::kByte).clone();
    const at::Tensor ours = JpegDecoder().decode(bytes, image_spec(75, 101));
    EXPECT_LE(mean_abs_diff(ours, pillow), 2.0) << "subsampling " << subsampling_name(subsampling);
  }
}

TEST(JpegDecoder, RefusesCorruptTruncatedAndEmptyInput) {
  const at::Tensor bytes = encode(test_image(64, 80, 3, 77));
  const int64_t size = bytes.numel();
  const JpegDecoder decoder;
  const FieldSpec spec = image_spec(64, 80);
  for (const int64_t keep :
       {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{20}, int64_t{200}, size / 2, size - 100, size - 2}) {
    const std::string message = error_of([&] { decoder.decode(bytes.slice(0, 0, keep).clone(), spec); });
    EXPECT_TRUE(contains(message, "JPEG (" + std::to_string(keep) + " bytes)")) << message;
  }
  EXPECT_TRUE(contains(error_of([&] { decoder.decode(at::empty({0}, at::kByte), spec); }), "empty JPEG (0 bytes)"));

  std::mt19937_64 rng(5);
  for (int round = 0; round < 20; ++round) {
    const at::Tensor noise = at::randint(0, 256, {static_cast<int64_t>(1 + rng() % 5000)}, at::kByte);
    error_of([&] { decoder.decode(noise, spec); });
  }
  // Damage inside the entropy-coded data need not be detectable (it may decode to other pixels),
  // but it must never crash: either an Error or an image of the right shape.
  for (int round = 0; round < 200; ++round) {
    at::Tensor damaged = bytes.clone();
    for (int flips = 0; flips < 1 + round % 4; ++flips) {
      damaged[static_cast<int64_t>(rng() % static_cast<uint64_t>(size))] = static_cast<int64_t>(rng() % 256);
    }
    try {
      EXPECT_EQ(decoder.decode(damaged, spec).sizes(), (std::vector<int64_t>{64, 80, 3}));
    } catch (const Error&) {
    }
  }
}

TEST(JpegDecoder, DecodesGoodImagesAfterBadOnesOnTheSameThread) {
  // libjpeg-turbo 2.1 leaves a handle mid-header after a bad header; the decoder must not reuse it.
  const at::Tensor good = encode(test_image(48, 64, 3, 12));
  const JpegDecoder decoder;
  const at::Tensor expected = decoder.decode(good, image_spec(48, 64));
  std::mt19937_64 rng(99);
  for (int round = 0; round < 100; ++round) {
    at::Tensor bad =
        good.slice(0, 0, static_cast<int64_t>(1 + rng() % static_cast<uint64_t>(good.numel() - 1))).clone();
    if (round % 3 == 0)
      bad[static_cast<int64_t>(rng() % static_cast<uint64_t>(bad.numel()))] = static_cast<int64_t>(rng() % 256);
    try {
      decoder.decode(bad, image_spec(48, 64));
    } catch (const Error&) {
    }
    ASSERT_TRUE(decoder.decode(good, image_spec(48, 64)).equal(expected)) << "after bad input " << round;
  }
}

TEST(JpegDecoder, ExplainsASizeOrSpecThatDoesNotFit) {
  const at::Tensor bytes = encode(test_image(90, 120, 3, 8));
  std::string message = error_of([&] { JpegDecoder().decode(bytes, image_spec(224, 224)); });
  EXPECT_TRUE(contains(message, "decodes to [90, 120, 3] but the field declares [224, 224, 3]")) << message;
  EXPECT_TRUE(contains(message, "resize_shorter")) << message;
  message = error_of([&] { JpegDecoder({.crop_height = 100, .crop_width = 100}).decode(bytes, image_spec(100, 100)); });
  EXPECT_TRUE(contains(message, "smaller than the crop")) << message;
  message = error_of([&] {
    JpegDecoder().decode(bytes, FieldSpec{"image", at::kFloat, {90, 120, 3}, std::nullopt, "jpeg"});
  });
  EXPECT_TRUE(contains(message, "uint8 [H, W, 3]")) << message;
  message = error_of([&] {
    JpegDecoder().decode(bytes, FieldSpec{"image", at::kByte, {kVariableLength, 120, 3}, 200, "jpeg"});
  });
  EXPECT_TRUE(contains(message, "[*, 120, 3]")) << message;
  error_of([&] { JpegDecoder().decode(bytes.to(at::kInt), image_spec(90, 120)); });
}

// `bytes` (a baseline JPEG) with the frame header's size replaced: what a damaged or hostile file
// can claim without the data to back it.
at::Tensor with_frame_size(const at::Tensor& bytes, int height, int width) {
  at::Tensor out = bytes.clone();
  uint8_t* data = out.data_ptr<uint8_t>();
  for (int64_t i = 2; i + 8 < out.numel(); ++i) {
    if (data[i] == 0xFF && data[i + 1] == 0xC0) {  // SOF0: length (2), precision (1), height (2), width (2)
      data[i + 5] = static_cast<uint8_t>(height >> 8);
      data[i + 6] = static_cast<uint8_t>(height & 0xFF);
      data[i + 7] = static_cast<uint8_t>(width >> 8);
      data[i + 8] = static_cast<uint8_t>(width & 0xFF);
      return out;
    }
  }
  ADD_FAILURE() << "no SOF0 marker";
  return out;
}

TEST(JpegDecoder, RefusesAHeaderClaimingMorePixelsThanItDecodes) {
  // Found by tests/fuzz/jpeg_decoder_fuzz: a 400-byte file claiming about 65000 x 65000 pixels, cropped
  // without a resize, made the decoder allocate 12.7 GB before it found the data missing.
  const at::Tensor huge = with_frame_size(encode(test_image(32, 48, 3, 4)), 20000, 30000);
  const JpegDecoder cropping({.crop_height = 64, .crop_width = 64});
  const std::string message = error_of([&] { cropping.decode(huge, image_spec(64, 64)); });
  EXPECT_TRUE(contains(message,
                       "JPEG of 30000 x 20000 pixels (600000000 to decode) is larger than ferry decodes "
                       "(134217728 pixels at most)"))
      << message;
  // With dct_scaling a resize decodes it at 1/8 (3750 x 2500): within the cap, so the missing data is
  // what is refused.
  const JpegDecoder resizing({.resize_shorter = 64, .crop_height = 64, .crop_width = 64, .dct_scaling = true});
  const std::string resized = error_of([&] { resizing.decode(huge, image_spec(64, 64)); });
  EXPECT_FALSE(contains(resized, "larger than ferry decodes")) << resized;
  EXPECT_TRUE(contains(resized, "JPEG (" + std::to_string(huge.numel()) + " bytes)")) << resized;
  // The same bytes with their own size still decode.
  EXPECT_EQ(JpegDecoder({.crop_height = 32, .crop_width = 32})
                .decode(with_frame_size(huge, 32, 48), image_spec(32, 32))
                .sizes(),
            (std::vector<int64_t>{32, 32, 3}));
}

TEST(JpegDecoder, TurnsCmykImagesIntoRgbAsPillowDoes) {
  // Stored (Adobe) CMYK values v: r = v_c * v_k / 255, and so on (Note [CMYK JPEGs]).
  const at::Tensor cmyk = test_image(16, 24, 4, 1);
  const at::Tensor bytes = encode(cmyk, 98, JpegSubsampling::k444);
  const at::Tensor rgb = JpegDecoder().decode(bytes, image_spec(16, 24));
  ASSERT_EQ(rgb.sizes(), (std::vector<int64_t>{16, 24, 3}));
  const at::Tensor values = cmyk.to(at::kDouble);
  const at::Tensor expected = (values.slice(2, 0, 3) * values.slice(2, 3, 4) / 255).round().clamp(0, 255).to(at::kByte);
  EXPECT_LT(mean_abs_diff(rgb, expected), 3.0);
}

TEST(JpegDecoder, ChecksItsOptions) {
  EXPECT_THROW(JpegDecoder({.resize_shorter = -1}), Error);
  EXPECT_THROW(JpegDecoder({.crop_height = -1, .crop_width = 4}), Error);
  EXPECT_THROW(JpegDecoder({.crop_height = 4}), Error);
  EXPECT_THROW(JpegDecoder({}, ""), Error);
}

TEST(JpegDecoder, IsBuiltInAndConfiguredOnesRegisterUnderTheirOwnNames) {
  DecoderRegistry registry;
  EXPECT_EQ(registry.find("jpeg")->name(), "jpeg");
  registry.add(std::make_shared<JpegDecoder>(
      JpegDecodeOptions{.resize_shorter = 32, .crop_height = 32, .crop_width = 32}, "jpeg_32"));
  const auto decoder = registry.find("jpeg_32");
  EXPECT_EQ(decoder->decode(encode(test_image(50, 70, 3, 2)), image_spec(32, 32)).sizes(),
            (std::vector<int64_t>{32, 32, 3}));
  EXPECT_THROW(registry.add(std::make_shared<JpegDecoder>()), Error);
}

}  // namespace
}  // namespace ferry
