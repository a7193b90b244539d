#include <ferry/io/decoders/jpeg_encoder.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ferry/io/decoders/jpeg_decoder.h>
#include <ferry/pipeline/error.h>
#include "tests/support/error_text.h"
#include "tests/support/image_checks.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;
using testing::mean_abs_diff;

FieldSpec image_spec(int64_t height, int64_t width) {
  return FieldSpec{"image", at::kByte, {height, width, 3}, std::nullopt, "jpeg"};
}

// Smooth waves plus a little noise, as photographs look to an encoder (pure noise would make any
// lossy codec look bad; a flat image would make it look perfect).
at::Tensor smooth_image(int64_t height, int64_t width, int64_t channels, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> phase(0, 6.28);
  std::uniform_int_distribution<int> jitter(-4, 4);
  std::vector<double> p(static_cast<size_t>(channels));
  for (double& value : p) value = phase(rng);
  at::Tensor image = at::empty({height, width, channels}, at::kByte);
  auto pixels = image.accessor<uint8_t, 3>();
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      for (int64_t c = 0; c < channels; ++c) {
        const double value =
            128 +
            80 * std::sin(static_cast<double>(x) / (11.0 + 4.0 * static_cast<double>(c)) + p[static_cast<size_t>(c)]) *
                std::cos(static_cast<double>(y) / (15.0 + 3.0 * static_cast<double>(c)) - p[static_cast<size_t>(c)]) +
            jitter(rng);
        pixels[y][x][c] = static_cast<uint8_t>(std::clamp(std::lround(value), 0L, 255L));
      }
    }
  }
  return image;
}

TEST(JpegEncoder, RoundTripsThroughTheDecoderWithinASmallError) {
  std::mt19937_64 rng(3);
  const JpegSubsampling kinds[] = {JpegSubsampling::k444, JpegSubsampling::k422, JpegSubsampling::k420};
  for (int round = 0; round < 24; ++round) {
    const int64_t height = 1 + static_cast<int64_t>(rng() % 150), width = 1 + static_cast<int64_t>(rng() % 200);
    const JpegSubsampling subsampling = kinds[round % 3];
    const int quality = 90 + static_cast<int>(rng() % 11);
    SCOPED_TRACE(std::to_string(height) + "x" + std::to_string(width) + " quality " + std::to_string(quality) +
                 " subsampling #" + std::to_string(round % 3));
    const at::Tensor original = smooth_image(height, width, 3, rng());
    const at::Tensor bytes = JpegEncoder({.quality = quality, .subsampling = subsampling}).encode(original);
    ASSERT_EQ(bytes.dim(), 1);
    ASSERT_EQ(bytes.scalar_type(), at::kByte);
    ASSERT_GT(bytes.numel(), 4);
    const uint8_t* data = bytes.data_ptr<uint8_t>();
    EXPECT_EQ(data[0], 0xFF);  // SOI ... EOI
    EXPECT_EQ(data[1], 0xD8);
    EXPECT_EQ(data[bytes.numel() - 2], 0xFF);
    EXPECT_EQ(data[bytes.numel() - 1], 0xD9);
    const at::Tensor decoded = JpegDecoder().decode(bytes, image_spec(height, width));
    ASSERT_EQ(decoded.sizes(), original.sizes());
    // Chroma subsampling of a tiny image blurs a lot of its colour; the bound is for real sizes.
    const double bound = height * width >= 64 * 64 ? 3.0 : 6.0;
    EXPECT_LT(mean_abs_diff(decoded, original), bound);
  }
}

TEST(JpegEncoder, GrayImagesAndGraySubsamplingComeBackAsEqualChannels) {
  const at::Tensor gray = smooth_image(45, 61, 1, 5);
  const at::Tensor decoded = JpegDecoder().decode(JpegEncoder().encode(gray), image_spec(45, 61));
  EXPECT_TRUE(decoded.select(2, 0).equal(decoded.select(2, 1)));
  EXPECT_TRUE(decoded.select(2, 0).equal(decoded.select(2, 2)));
  EXPECT_LT(mean_abs_diff(decoded.select(2, 0), gray.select(2, 0)), 3.0);

  // An RGB image stored as gray: one channel, whatever the colours were.
  const at::Tensor rgb = smooth_image(40, 40, 3, 6);
  const at::Tensor as_gray =
      JpegDecoder().decode(JpegEncoder({.subsampling = JpegSubsampling::kGray}).encode(rgb), image_spec(40, 40));
  EXPECT_TRUE(as_gray.select(2, 0).equal(as_gray.select(2, 2)));
  EXPECT_FALSE(rgb.select(2, 0).equal(rgb.select(2, 2)));
}

TEST(JpegEncoder, WritesProgressiveJpegsThatDecodeAsTheBaselineOnesDo) {
  const at::Tensor image = smooth_image(70, 90, 3, 7);
  const at::Tensor baseline = JpegEncoder().encode(image);
  const at::Tensor progressive = JpegEncoder({.progressive = true}).encode(image);
  // A progressive file's frame header is SOF2 (0xFFC2), a baseline one's SOF0 (0xFFC0).
  const auto has_marker = [](const at::Tensor& bytes, uint8_t marker) {
    const uint8_t* data = bytes.data_ptr<uint8_t>();
    for (int64_t i = 0; i + 1 < bytes.numel(); ++i) {
      if (data[i] == 0xFF && data[i + 1] == marker) return true;
    }
    return false;
  };
  EXPECT_TRUE(has_marker(progressive, 0xC2));
  EXPECT_FALSE(has_marker(baseline, 0xC2));
  // The same coefficients, scan by scan: the same pixels.
  EXPECT_TRUE(
      JpegDecoder().decode(progressive, image_spec(70, 90)).equal(JpegDecoder().decode(baseline, image_spec(70, 90))));
}

// One thread's encoder handle writes baseline, progressive and gray files in turn (as test folders are
// made): each file is whole, whatever the handle wrote before it.
TEST(JpegEncoder, BaselineProgressiveAndGrayFilesInTurnEachDecode) {
  std::mt19937_64 rng(41);
  for (int k = 0; k < 60; ++k) {
    const int64_t height = 40 + static_cast<int64_t>(rng() % 80), width = 40 + static_cast<int64_t>(rng() % 80);
    JpegEncodeOptions options;
    options.progressive = k % 5 == 4;
    if (k % 7 == 6) options.subsampling = JpegSubsampling::kGray;
    const at::Tensor image = smooth_image(height, width, 3, rng());
    const at::Tensor file = JpegEncoder(options).encode(image);
    const at::Tensor again = JpegEncoder(options).encode(image);
    EXPECT_TRUE(file.equal(again)) << "file " << k << ": the same image and options, other bytes";
    at::Tensor decoded;
    EXPECT_NO_THROW(decoded = JpegDecoder().decode(file, image_spec(height, width))) << "file " << k;
    if (!decoded.defined()) continue;
    // A gray file holds the image's luma (BT.601), decoded into three equal channels.
    const at::Tensor expected =
        options.subsampling != JpegSubsampling::kGray
            ? image
            : (image.to(at::kFloat).matmul(at::tensor({0.299f, 0.587f, 0.114f})).round().to(at::kByte))
                  .unsqueeze(2)
                  .expand({height, width, 3});
    EXPECT_LT(mean_abs_diff(decoded, expected), 3) << "file " << k;
  }
}

TEST(JpegEncoder, HigherQualityCostsBytesAndBuysAccuracy) {
  const at::Tensor image = smooth_image(128, 128, 3, 7);
  const at::Tensor low = JpegEncoder({.quality = 30}).encode(image);
  const at::Tensor high = JpegEncoder({.quality = 98}).encode(image);
  EXPECT_LT(low.numel(), high.numel());
  EXPECT_GT(mean_abs_diff(JpegDecoder().decode(low, image_spec(128, 128)), image),
            mean_abs_diff(JpegDecoder().decode(high, image_spec(128, 128)), image));
}

TEST(JpegEncoder, IsDeterministicAcrossCallsThreadsAndStrides) {
  std::vector<at::Tensor> images;
  for (uint64_t i = 0; i < 12; ++i) images.push_back(smooth_image(33 + static_cast<int64_t>(i), 70, 3, 100 + i));
  const JpegEncoder encoder({.quality = 85});
  std::vector<at::Tensor> serial;
  for (const at::Tensor& image : images) serial.push_back(encoder.encode(image));
  for (size_t i = 0; i < images.size(); ++i) EXPECT_TRUE(encoder.encode(images[i]).equal(serial[i])) << i;

  // One encoder, four threads at once, each image many times: the same bytes (handles per thread).
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 5; ++repeat) {
        for (size_t i = 0; i < images.size(); ++i) {
          if (!encoder.encode(images[(i + t) % images.size()]).equal(serial[(i + t) % images.size()])) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;

  // A view with other strides is encoded as its contiguous copy would be.
  const at::Tensor wide = smooth_image(50, 80, 3, 9);
  const at::Tensor view = wide.slice(1, 10, 70, 2);  // every other column of a window
  ASSERT_FALSE(view.is_contiguous());
  EXPECT_TRUE(encoder.encode(view).equal(encoder.encode(view.contiguous())));
}

TEST(JpegEncoder, EncodesFourChannelsAsCmykWhichTheDecoderTurnsIntoRgb) {
  const at::Tensor bytes = JpegEncoder({.subsampling = JpegSubsampling::k444}).encode(smooth_image(16, 16, 4, 1));
  EXPECT_GT(bytes.numel(), 100);
  EXPECT_EQ(JpegDecoder().decode(bytes, image_spec(16, 16)).sizes(), (std::vector<int64_t>{16, 16, 3}));
}

TEST(JpegEncoder, RefusesWhatIsNotAnImage) {
  const JpegEncoder encoder;
  const at::Tensor image = smooth_image(8, 8, 3, 2);
  EXPECT_TRUE(contains(error_of([&] { encoder.encode(image.to(at::kFloat)); }), "float32"));
  EXPECT_TRUE(contains(error_of([&] { encoder.encode(image.select(2, 0)); }), "[8, 8]"));
  EXPECT_TRUE(contains(error_of([&] { encoder.encode(at::zeros({8, 8, 2}, at::kByte)); }), "[8, 8, 2]"));
  EXPECT_TRUE(contains(error_of([&] { encoder.encode(at::zeros({8, 8, 5}, at::kByte)); }), "[8, 8, 5]"));
  EXPECT_TRUE(contains(error_of([&] { encoder.encode(at::zeros({0, 8, 3}, at::kByte)); }), "[0, 8, 3]"));
  EXPECT_TRUE(contains(error_of([&] { encoder.encode(at::zeros({2, 70000, 1}, at::kByte)); }), "65535"));
  EXPECT_TRUE(contains(error_of([&] { encoder.encode(at::zeros({2, 8, 3, 1}, at::kByte)); }), "[2, 8, 3, 1]"));
  EXPECT_TRUE(contains(error_of([] { JpegEncoder({.quality = 0}); }), "quality"));
  EXPECT_TRUE(contains(error_of([] { JpegEncoder({.quality = 101}); }), "101"));
}

}  // namespace
}  // namespace ferry
