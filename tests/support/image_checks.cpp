#include "tests/support/image_checks.h"

#include <ATen/ATen.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

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

at::Tensor reference_resize(const at::Tensor& image, int64_t out_h, int64_t out_w) {
  const int64_t in_h = image.size(0), in_w = image.size(1);
  const auto src = image.accessor<uint8_t, 3>();
  at::Tensor out = at::empty({out_h, out_w, 3}, at::kByte);
  auto dst = out.accessor<uint8_t, 3>();
  const auto coordinate = [](int64_t i, int64_t in, int64_t resized) {
    const double at =
        std::max((static_cast<double>(i) + 0.5) * static_cast<double>(in) / static_cast<double>(resized) - 0.5, 0.0);
    const int64_t lo = std::min(static_cast<int64_t>(at), in - 1);
    return std::make_pair(lo, std::min(at - static_cast<double>(lo), 1.0));
  };
  for (int64_t y = 0; y < out_h; ++y) {
    const auto [y0, fy] = coordinate(y, in_h, out_h);
    const int64_t y1 = std::min(y0 + 1, in_h - 1);
    for (int64_t x = 0; x < out_w; ++x) {
      const auto [x0, fx] = coordinate(x, in_w, out_w);
      const int64_t x1 = std::min(x0 + 1, in_w - 1);
      for (int64_t c = 0; c < 3; ++c) {
        const double v = (1 - fy) * ((1 - fx) * src[y0][x0][c] + fx * src[y0][x1][c]) +
                         fy * ((1 - fx) * src[y1][x0][c] + fx * src[y1][x1][c]);
        dst[y][x][c] = static_cast<uint8_t>(std::lround(v));
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
