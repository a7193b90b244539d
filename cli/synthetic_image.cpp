#include "cli/synthetic_image.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <ferry/io/util/splitmix64.h>
#include <ferry/pipeline/error.h>

namespace ferry::cli {
namespace {

// Note [Synthetic images in integers]
// The same (seed, sample) must give the same pixels on every machine, or the same command would
// write different datasets on two hosts. Floating point can break that quietly: libm's sin/cos
// differ between versions in the last bit, and a compiler may fuse a*b+c into one FMA on a CPU that
// has it, so a value that rounds to 127 here rounds to 128 there. Everything below is integer
// arithmetic: angles come from a fixed table of 256*cos(k * 11.25 degrees), lengths are in 1/256 of
// a pixel, proportions in 1/256 or 1/65536, divisions by a per-image value are multiplications by
// its reciprocal computed once (2^32 / d, truncated: the same everywhere), colours come from an
// integer HSV conversion. Right shifts of negative values are arithmetic (defined since C++20).

// round(256 * cos(2 pi k / 32)); sin(k) is cos(k - 8).
constexpr int64_t kCos[32] = {256,  251,  237,  213,  181,  142,  98,  50,  0, -50, -98, -142, -181, -213, -237, -251,
                              -256, -251, -237, -213, -181, -142, -98, -50, 0, 50,  98,  142,  181,  213,  237,  251};
int64_t cos32(uint64_t k) { return kCos[k % 32]; }
int64_t sin32(uint64_t k) { return kCos[(k + 24) % 32]; }

// 2^32 / d: x / d becomes (x * reciprocal(d)) >> 32.
int64_t reciprocal(int64_t d) { return (int64_t{1} << 32) / std::max<int64_t>(1, d); }

// SplitMix64: a fast generator whose stream depends only on its seed.
class Stream {
 public:
  explicit Stream(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_); }
  /// Uniform in [low, high] (the tiny modulo bias does not matter here).
  int64_t between(int64_t low, int64_t high) {
    return low + static_cast<int64_t>(next() % static_cast<uint64_t>(high - low + 1));
  }

 private:
  uint64_t state_;
};

struct Rgb {
  int32_t r = 0, g = 0, b = 0;
};

// Hue in 1/256 of a sixth of the wheel (0..1535, wrapping), saturation and value 0..255.
Rgb hsv(int64_t hue, int64_t saturation, int64_t value) {
  hue %= 1536;
  if (hue < 0) hue += 1536;
  const int64_t sector = hue / 256, f = hue % 256;
  const auto v = static_cast<int32_t>(value);
  const auto p = static_cast<int32_t>(value * (255 - saturation) / 255);
  const auto q = static_cast<int32_t>(value * (255 * 255 - saturation * f) / (255 * 255));
  const auto t = static_cast<int32_t>(value * (255 * 255 - saturation * (255 - f)) / (255 * 255));
  switch (sector) {
    case 0: return {v, t, p};
    case 1: return {q, v, p};
    case 2: return {p, v, t};
    case 3: return {p, q, v};
    case 4: return {t, p, v};
    default: return {v, p, q};
  }
}

// The image while it is made: RGB per pixel, row-major, values that may leave 0..255 until the end.
struct Canvas {
  int64_t height = 0, width = 0;
  std::vector<int32_t> rgb;   // height * width * 3
  std::vector<int32_t> luma;  // height * width: texture, added to all three channels at the end
};

enum class Shape { kEllipse, kRectangle, kDiamond };

struct Object {
  Shape shape = Shape::kEllipse;
  int64_t cx = 0, cy = 0;  // centre, pixels
  int64_t a = 1, b = 1;    // half-extents along the object's own axes, in 1/256 pixel
  uint64_t angle = 0;      // in 32nds of a turn
  Rgb colour;
  // Shading: brightness 256 +- `shade` (/256) across the object, brightest towards light_angle.
  uint64_t light_angle = 0;
  int64_t shade = 0;
};

// Paints `o` over the canvas within its bounding box. Coverage is 0..256 per pixel, ramped over
// about two pixels at the edge (anti-aliasing: hard edges are rare in photographs), from an
// approximate signed distance to the edge, `inside`, in 1/256 pixel.
void paint(const Object& o, Canvas& canvas) {
  const int64_t reach = (o.a + o.b) / 256 + 2;  // covers the rotated shape and its ramp
  const int64_t y0 = std::max<int64_t>(0, o.cy - reach), y1 = std::min(canvas.height - 1, o.cy + reach);
  const int64_t x0 = std::max<int64_t>(0, o.cx - reach), x1 = std::min(canvas.width - 1, o.cx + reach);
  const int64_t c = cos32(o.angle), s = sin32(o.angle);
  const int64_t lc = cos32(o.light_angle), ls = sin32(o.light_angle);
  const int64_t per_a = reciprocal(o.a), per_b = reciprocal(o.b), per_extent = reciprocal(std::max(o.a, o.b));
  const int64_t smaller = std::min(o.a, o.b);
  const int32_t colour[3] = {o.colour.r, o.colour.g, o.colour.b};
  for (int64_t y = y0; y <= y1; ++y) {
    const int64_t dy = y - o.cy;
    int32_t* pixel = canvas.rgb.data() + 3 * (y * canvas.width + x0);
    for (int64_t x = x0; x <= x1; ++x, pixel += 3) {
      const int64_t dx = x - o.cx;
      const int64_t u = std::abs(dx * c + dy * s);  // along the object's axes, 1/256 pixel
      const int64_t v = std::abs(-dx * s + dy * c);
      int64_t inside = 0;
      switch (o.shape) {
        case Shape::kEllipse: {
          // (u/a)^2 + (v/b)^2 = r^2, in 1/65536; near the edge 1 - r ~ (1 - r^2) / 2.
          const int64_t ua = (u * per_a) >> 16, vb = (v * per_b) >> 16;
          const int64_t r2 = (ua * ua + vb * vb) >> 16;
          inside = ((65536 - r2) * smaller) >> 17;
          break;
        }
        case Shape::kRectangle: inside = std::min(o.a - u, o.b - v); break;
        case Shape::kDiamond: {  // u/a + v/b <= 1
          const int64_t ua = (u * per_a) >> 16, vb = (v * per_b) >> 16;
          inside = ((65536 - ua - vb) * smaller) >> 16;
          break;
        }
      }
      const int64_t alpha = std::clamp<int64_t>(128 + inside / 2, 0, 256);
      if (alpha == 0) continue;
      const int64_t light = std::clamp<int64_t>(256 + (((dx * lc + dy * ls) * o.shade * per_extent) >> 32), 96, 400);
      for (int ch = 0; ch < 3; ++ch) {
        const int64_t lit = std::min<int64_t>(255, (colour[ch] * light) >> 8);
        pixel[ch] = static_cast<int32_t>((pixel[ch] * (256 - alpha) + lit * alpha) >> 8);
      }
    }
  }
}

// An object of `shape` and `colour` at a random place, size (half-extents between min_size and
// max_size pixels) and angle, centred within the middle `spread`/256 of the image.
Object place(Stream& rng, Shape shape, Rgb colour, int64_t min_size, int64_t max_size, int64_t spread,
             const Canvas& canvas) {
  Object o;
  o.shape = shape;
  o.colour = colour;
  const int64_t margin_x = canvas.width * (256 - spread) / 512, margin_y = canvas.height * (256 - spread) / 512;
  o.cx = rng.between(margin_x, std::max(margin_x, canvas.width - 1 - margin_x));
  o.cy = rng.between(margin_y, std::max(margin_y, canvas.height - 1 - margin_y));
  o.a = rng.between(min_size * 256, std::max(min_size, max_size) * 256);
  o.b = rng.between(std::max<int64_t>(256, o.a / 2), o.a);  // an aspect ratio between 1:1 and 2:1
  o.angle = rng.next() % 32;
  o.light_angle = rng.next() % 32;
  return o;
}

// Value noise into canvas.luma: random values in [-amplitude, amplitude] on a lattice of
// `cell`-pixel squares, blended between lattice points with smoothstep weights. Several cell sizes
// added together give the mottled, multi-scale texture of real surfaces (what makes photos cost
// bits in JPEG).
void add_texture(Canvas& canvas, int64_t cell, int32_t amplitude, uint64_t seed) {
  const int64_t columns = canvas.width / cell + 2, rows = canvas.height / cell + 2;
  std::vector<int32_t> lattice(static_cast<size_t>(rows * columns));
  Stream rng(seed);
  for (int32_t& value : lattice) value = static_cast<int32_t>(rng.between(-amplitude, amplitude));
  // smoothstep(t) = 3t^2 - 2t^3, t and the result in 1/256.
  std::vector<int32_t> weight(static_cast<size_t>(cell));
  for (int64_t i = 0; i < cell; ++i) {
    const int64_t t = i * 256 / cell;
    weight[static_cast<size_t>(i)] = static_cast<int32_t>(t * t * (768 - 2 * t) / 65536);
  }
  for (int64_t y = 0; y < canvas.height; ++y) {
    const int32_t wy = weight[static_cast<size_t>(y % cell)];
    const int32_t* upper = lattice.data() + (y / cell) * columns;
    const int32_t* lower = upper + columns;
    int32_t* luma = canvas.luma.data() + y * canvas.width;
    // Cell by cell along the row: no division per pixel.
    for (int64_t gx = 0, x = 0; x < canvas.width; ++gx) {
      const int32_t left = upper[gx] * (256 - wy) + lower[gx] * wy;
      const int32_t right = upper[gx + 1] * (256 - wy) + lower[gx + 1] * wy;
      const int64_t end = std::min(canvas.width, x + cell);
      for (const int32_t* wx = weight.data(); x < end; ++x, ++wx) luma[x] += (left * (256 - *wx) + right * *wx) >> 16;
    }
  }
}

}  // namespace

at::Tensor synthetic_image(uint64_t seed, uint64_t sample, uint64_t label, const SyntheticImageSpec& spec) {
  const int64_t height = spec.height, width = spec.width;
  if (height < 1 || width < 1 || height > 65535 || width > 65535) {
    throw Error("synthetic image: sides must be 1..65535, found " + std::to_string(height) + "x" +
                std::to_string(width));
  }
  if (spec.classes == 0 || label >= spec.classes) {
    throw Error("synthetic image: label " + std::to_string(label) + " is not below the class count " +
                std::to_string(spec.classes));
  }
  // Two rounds of mixing, so that neighbouring (seed, sample) pairs give unrelated streams.
  Stream rng(Stream(seed ^ Stream(sample).next()).next());
  Canvas canvas{height, width, std::vector<int32_t>(static_cast<size_t>(height * width * 3)),
                std::vector<int32_t>(static_cast<size_t>(height * width))};

  // The background: a gradient between two muted colours of nearby hues, and a vignette. With px,
  // py the doubled offsets from the centre: t = 256 (px gx + py gy + span) / 2 span runs 0..256
  // along the gradient, and the brightness drops by vignette * (px^2 + py^2) / (W^2 + H^2).
  const int64_t hue = rng.between(0, 1535);
  const Rgb from = hsv(hue, rng.between(30, 110), rng.between(90, 210));
  const Rgb to = hsv(hue + rng.between(-300, 300), rng.between(30, 110), rng.between(90, 210));
  const uint64_t direction = rng.next() % 32;
  const int64_t gx = cos32(direction), gy = sin32(direction);
  const int64_t span = std::max<int64_t>(1, width * std::abs(gx) + height * std::abs(gy));
  const int64_t per_span = reciprocal(2 * span);
  const int64_t vignette = rng.between(0, 80);
  const int64_t per_diagonal2 = reciprocal(width * width + height * height);
  const int32_t from_rgb[3] = {from.r, from.g, from.b};
  const int32_t step[3] = {to.r - from.r, to.g - from.g, to.b - from.b};
  for (int64_t y = 0; y < height; ++y) {
    const int64_t py = 2 * y + 1 - height;
    int32_t* pixel = canvas.rgb.data() + 3 * y * width;
    for (int64_t x = 0; x < width; ++x, pixel += 3) {
      const int64_t px = 2 * x + 1 - width;
      const int64_t t = std::clamp<int64_t>(((px * gx + py * gy + span) * 256 * per_span) >> 32, 0, 256);
      const int64_t dim = 256 - ((vignette * (px * px + py * py) * per_diagonal2) >> 32);
      for (int ch = 0; ch < 3; ++ch)
        pixel[ch] = static_cast<int32_t>(((from_rgb[ch] * 256 + step[ch] * t) * dim) >> 16);
    }
  }

  // Distractors: small shapes of any colour, anywhere.
  const int64_t side = std::min(height, width);
  const int64_t distractors = rng.between(2, 5);
  for (int64_t i = 0; i < distractors; ++i) {
    const auto shape = static_cast<Shape>(rng.next() % 3);
    const Rgb colour = hsv(rng.between(0, 1535), rng.between(60, 200), rng.between(60, 230));
    Object o = place(rng, shape, colour, std::max<int64_t>(1, side / 16), std::max<int64_t>(1, side / 7), 256, canvas);
    o.shade = rng.between(0, 40);
    paint(o, canvas);
  }

  // The main object: the label's hue (classes spread evenly around the wheel, +-24/1536 of jitter)
  // and the label's shape, large and near the middle.
  const auto class_hue = static_cast<int64_t>(label * 1536 / spec.classes);
  const Rgb colour = hsv(class_hue + rng.between(-24, 24), rng.between(170, 250), rng.between(170, 250));
  Object main = place(rng, static_cast<Shape>(label % 3), colour, std::max<int64_t>(1, side / 6),
                      std::max<int64_t>(1, side / 3), 128, canvas);
  main.shade = rng.between(40, 80);
  paint(main, canvas);

  // Texture over everything, at three scales relative to the image (so a small image looks alike).
  // The amplitudes set the JPEG size: with these, 256x256 at quality 90 is about 15 KB.
  add_texture(canvas, std::max<int64_t>(2, side / 8), 20, rng.next());
  add_texture(canvas, std::max<int64_t>(2, side / 32), 12, rng.next());
  add_texture(canvas, std::max<int64_t>(2, side / 85), 18, rng.next());

  // Sensor noise, -3..3 levels per channel, from a stream per row (cheap, and still one per image);
  // then the texture, and the values clamped to bytes.
  at::Tensor out = at::empty({height, width, 3}, at::kByte);
  uint8_t* target = out.data_ptr<uint8_t>();
  const uint64_t noise_seed = rng.next();
  for (int64_t y = 0; y < height; ++y) {
    Stream noise(noise_seed + static_cast<uint64_t>(y));
    uint64_t bits = 0;
    int left = 0;
    const int32_t* pixel = canvas.rgb.data() + 3 * y * width;
    const int32_t* luma = canvas.luma.data() + y * width;
    uint8_t* row = target + 3 * y * width;
    for (int64_t x = 0; x < width; ++x, pixel += 3, row += 3) {
      if (left == 0) {
        bits = noise.next();
        left = 5;  // 5 pixels of 3 draws of 4 bits from each 64-bit word
      }
      for (int ch = 0; ch < 3; ++ch) {
        // The sum of two 0..3 draws, less 3: -3..3, mean 0, most often small (a triangular density).
        const auto jitter = static_cast<int32_t>((bits & 3) + ((bits >> 2) & 3)) - 3;
        bits >>= 4;
        row[ch] = static_cast<uint8_t>(std::clamp<int32_t>(pixel[ch] + luma[x] + jitter, 0, 255));
      }
      --left;
    }
  }
  return out;
}

}  // namespace ferry::cli
