#include "tests/support/image_checks.h"

#include <ATen/ATen.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ferry::testing {

at::Tensor test_image(int64_t height, int64_t width, int channels, uint64_t seed, int noise) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> phase(0, 6.28);
  std::uniform_int_distribution<int> jitter(-noise, noise);
  const double p[4] = {phase(rng), phase(rng), phase(rng), phase(rng)};
  at::Tensor image = at::empty({height, width, channels}, at::kByte);
  uint8_t* out = image.data_ptr<uint8_t>();
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        const double v = 128 +
                         90 * std::sin(static_cast<double>(x) / (13.0 + 5 * c) + p[c]) *
                             std::cos(static_cast<double>(y) / (17.0 + 3 * c) - p[c]) +
                         jitter(rng);
        *out++ = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return image;
}

double mean_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().mean().item<double>();
}

double augment_tolerance(at::ScalarType dtype, double value) {
  const double magnitude = std::max(1.0, std::fabs(value));
  switch (dtype) {
    case at::kHalf: return magnitude * std::ldexp(1.0, -10);
    case at::kBFloat16: return magnitude * std::ldexp(1.0, -7);
    default: return magnitude * 1e-5;
  }
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

namespace {

// One axis of reference_resample(): out x in weights.
std::vector<std::vector<double>> filter_weights(int64_t in, int64_t out, bool bicubic) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double widen = std::max(scale, 1.0);
  const double support = (bicubic ? 2.0 : 1.0) * widen;
  const auto filter = [&](double x) {
    x = std::fabs(x / widen);
    if (!bicubic) return x < 1 ? 1 - x : 0.0;
    constexpr double a = -0.5;
    if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
  };
  std::vector<std::vector<double>> weights(static_cast<size_t>(out), std::vector<double>(static_cast<size_t>(in)));
  for (int64_t o = 0; o < out; ++o) {
    const double centre = (static_cast<double>(o) + 0.5) * scale;
    double sum = 0;
    for (int64_t i = 0; i < in; ++i) {
      const double distance = static_cast<double>(i) + 0.5 - centre;
      if (std::fabs(distance) >= support) continue;
      weights[static_cast<size_t>(o)][static_cast<size_t>(i)] = filter(distance);
      sum += filter(distance);
    }
    for (double& w : weights[static_cast<size_t>(o)]) w /= sum;
  }
  return weights;
}

uint8_t to_byte(double v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }

}  // namespace

at::Tensor reference_resample(const at::Tensor& image, int64_t out_h, int64_t out_w, bool bicubic) {
  const int64_t in_h = image.size(0), in_w = image.size(1);
  const auto src = image.accessor<uint8_t, 3>();
  const auto columns = filter_weights(in_w, out_w, bicubic);
  const auto rows = filter_weights(in_h, out_h, bicubic);
  at::Tensor middle = at::empty({in_h, out_w, 3}, at::kByte);
  auto mid = middle.accessor<uint8_t, 3>();
  for (int64_t y = 0; y < in_h; ++y) {
    for (int64_t x = 0; x < out_w; ++x) {
      for (int64_t c = 0; c < 3; ++c) {
        double v = 0;
        for (int64_t i = 0; i < in_w; ++i) v += columns[static_cast<size_t>(x)][static_cast<size_t>(i)] * src[y][i][c];
        mid[y][x][c] = to_byte(v);
      }
    }
  }
  at::Tensor out = at::empty({out_h, out_w, 3}, at::kByte);
  auto dst = out.accessor<uint8_t, 3>();
  for (int64_t y = 0; y < out_h; ++y) {
    for (int64_t x = 0; x < out_w; ++x) {
      for (int64_t c = 0; c < 3; ++c) {
        double v = 0;
        for (int64_t i = 0; i < in_h; ++i) v += rows[static_cast<size_t>(y)][static_cast<size_t>(i)] * mid[i][x][c];
        dst[y][x][c] = to_byte(v);
      }
    }
  }
  return out;
}

at::Tensor encode_png(const at::Tensor& rgb) {
  const at::Tensor pixels = rgb.contiguous();
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(pixels.size(1));
  image.height = static_cast<png_uint_32>(pixels.size(0));
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data_ptr<uint8_t>(), 0, nullptr)) {
    throw std::runtime_error(std::string("encode_png: ") + image.message);
  }
  at::Tensor out = at::empty({static_cast<int64_t>(size)}, at::kByte);
  if (!png_image_write_to_memory(&image, out.data_ptr<uint8_t>(), &size, 0, pixels.data_ptr<uint8_t>(), 0, nullptr)) {
    throw std::runtime_error(std::string("encode_png: ") + image.message);
  }
  return out.slice(0, 0, static_cast<int64_t>(size)).clone();
}

}  // namespace ferry::testing
