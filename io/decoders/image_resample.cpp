#include "ferry/io/decoders/image_resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ferry::detail {
namespace {

// Note [Pillow resampling]
// Pillow's Image.resize (libImaging/Resample.c) is what torchvision's PIL path runs, and torch's
// antialiased interpolate ports its filter (in float, without Pillow's rounding). What the bytes depend
// on, and this file therefore copies exactly:
//
// - The box arrives as four float32 values (Pillow parses it with "ffff"); the scale is
//   (double)(float)(right - left) / out_size, the float subtraction included, and output i samples
//   around centre = left + (i + 0.5) * scale.
// - Shrinking widens the filter by the scale (support = filter support * max(scale, 1)), so every
//   source pixel under an output pixel counts: this is the antialiasing. The taps run from
//   (int)(centre - support + 0.5) to (int)(centre + support + 0.5), clipped to the image, with
//   weights filter((x - centre + 0.5) / max(scale, 1)) divided by their sum, so a clipped edge keeps
//   its brightness.
// - The weights become integers with 22 fraction bits, rounded half away from zero; each pass adds
//   half a unit, shifts and clamps to 0..255, and the horizontal pass runs first, into uint8. The
//   rounding in the middle is part of the result: a float pipeline differs by a level here and there.
//
// Every expression that feeds a tap's position or weight is evaluated in the order Pillow writes it:
// reordering, or fusing a multiply-add (-ffp-contract=fast with FMA, nvcc's default), moves a weight
// by an ulp, and now and then that moves a rounded weight and a pixel by one level. The tables are
// therefore built here, on the host, also for a device kernel.
//
// A pass whose axis copies whole pixels (scale 1, an integer offset) leaves them as they are, since its
// taps are then a single weight of exactly 1 << 22 among zeros: the decoders skip such a resample.

constexpr int32_t kOne = int32_t{1} << kResampleWeightBits;
constexpr int32_t kHalf = kOne >> 1;

// Pillow's bilinear_filter: a triangle of support 1.
double triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys' cubic convolution of support 2, written as Pillow's bicubic_filter so its roundings match.
double cubic(double x, double a) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Where an axis' output samples sit: output i is centred on begin + (i + 0.5) * scale.
struct FilterAxis {
  double begin = 0, scale = 0;
};

FilterAxis axis_window(int64_t in_size, double box_begin, double box_end, int64_t out_size, bool antialias) {
  if (in_size < 1 || out_size < 1 || in_size > std::numeric_limits<int32_t>::max() ||
      out_size > std::numeric_limits<int32_t>::max()) {
    throw std::invalid_argument("resample: sizes must be 1.." + std::to_string(std::numeric_limits<int32_t>::max()) +
                                ", got " + std::to_string(in_size) + " -> " + std::to_string(out_size));
  }
  // Written so that NaN fails too.
  if (!(box_begin >= 0 && box_begin <= box_end && box_end <= static_cast<double>(in_size))) {
    throw std::invalid_argument("resample: the box [" + std::to_string(box_begin) + ", " + std::to_string(box_end) +
                                ") must lie within 0.." + std::to_string(in_size));
  }
  if (!antialias) return {box_begin, (box_end - box_begin) / static_cast<double>(out_size)};
  const auto begin = static_cast<float>(box_begin), end = static_cast<float>(box_end);
  const float span = end - begin;  // in float, as Pillow subtracts
  return {begin, static_cast<double>(span) / static_cast<double>(out_size)};
}

// Rounds Pillow's way (normalize_coeffs_8bpc): half away from zero, truncating.
int32_t to_fixed(double weight) {
  return static_cast<int32_t>(weight < 0 ? -0.5 + weight * kOne : 0.5 + weight * kOne);
}

// Sets max_taps to the widest output's count and packs the weights (laid out `stride` apart) to it: the
// bound that a filter's support gives is often wider than any output needs, or than a small image.
void shrink_to_widest(ResampleTaps& taps, int64_t stride) {
  taps.max_taps = taps.count.empty() ? 0 : *std::max_element(taps.count.begin(), taps.count.end());
  if (taps.max_taps == stride) return;
  const size_t n = taps.first.size(), from = static_cast<size_t>(stride), to = static_cast<size_t>(taps.max_taps);
  for (size_t i = 0; i < n; ++i) std::copy_n(taps.weights.data() + i * from, to, taps.weights.data() + i * to);
  taps.weights.resize(n * to);
}

// Pillow's precompute_coeffs() and normalize_coeffs_8bpc(), expression for expression.
ResampleTaps pillow_taps(int64_t in_size, const FilterAxis& w, int64_t out_size, Interpolation interpolation) {
  const bool bicubic = interpolation == Interpolation::kBicubic;
  const double filterscale = std::max(w.scale, 1.0);
  const double support = (bicubic ? 2.0 : 1.0) * filterscale;
  const auto stride = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const double inv_filterscale = 1.0 / filterscale;

  ResampleTaps taps;
  const auto n = static_cast<size_t>(out_size);
  taps.first.resize(n);
  taps.count.resize(n);
  taps.weights.assign(n * static_cast<size_t>(stride), 0);
  std::vector<double> k(static_cast<size_t>(stride));
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = w.begin + (static_cast<double>(i) + 0.5) * w.scale;
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t xmax = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size) - xmin;
    double sum = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      const double at = (static_cast<double>(x + xmin) - center + 0.5) * inv_filterscale;
      const double weight = bicubic ? cubic(at, -0.5) : triangle(at);
      k[static_cast<size_t>(x)] = weight;
      sum += weight;
    }
    int32_t* out = taps.weights.data() + i * stride;
    for (int64_t x = 0; x < xmax; ++x) {
      double weight = k[static_cast<size_t>(x)];
      if (sum != 0.0) weight /= sum;  // Pillow leaves an all-zero window as it is
      out[x] = to_fixed(weight);
    }
    taps.first[static_cast<size_t>(i)] = static_cast<int32_t>(xmin);
    taps.count[static_cast<size_t>(i)] = static_cast<int32_t>(xmax);
  }
  shrink_to_widest(taps, stride);
  return taps;
}

// torch's upsample_bilinear2d / upsample_bicubic2d (align_corners=False): a fixed 2 or 4 taps around
// the source position, and where they fall outside the image, its edge pixel instead (torch clamps the
// index), so the weights fold onto the edge.
ResampleTaps torch_taps(int64_t in_size, const FilterAxis& w, int64_t out_size, Interpolation interpolation) {
  const bool bicubic = interpolation == Interpolation::kBicubic;
  const int32_t width = bicubic ? 4 : 2;
  ResampleTaps taps;
  const auto n = static_cast<size_t>(out_size);
  taps.first.resize(n);
  taps.count.resize(n);
  taps.weights.assign(n * static_cast<size_t>(width), 0);
  for (int64_t i = 0; i < out_size; ++i) {
    const double at = w.begin + (static_cast<double>(i) + 0.5) * w.scale - 0.5;
    const double base = std::floor(at);
    const auto lowest = static_cast<int64_t>(base) - (bicubic ? 1 : 0);
    const int64_t first = std::clamp<int64_t>(lowest, 0, in_size - 1);
    const int64_t last = std::clamp<int64_t>(lowest + width - 1, 0, in_size - 1);
    int32_t* out = taps.weights.data() + i * width;
    for (int32_t t = 0; t < width; ++t) {
      const double d = static_cast<double>(lowest + t) - at;
      const double weight = bicubic ? cubic(d, -0.75) : triangle(d);
      out[std::clamp<int64_t>(lowest + t, 0, in_size - 1) - first] += to_fixed(weight);
    }
    // The weights sum to 1 before rounding; give the rounding's residue to the heaviest tap, so that a
    // flat image stays flat.
    const int32_t count = static_cast<int32_t>(last - first + 1);
    int32_t sum = 0, heaviest = 0;
    for (int32_t t = 0; t < count; ++t) {
      sum += out[t];
      if (out[t] > out[heaviest]) heaviest = t;
    }
    out[heaviest] += kOne - sum;
    taps.first[static_cast<size_t>(i)] = static_cast<int32_t>(first);
    taps.count[static_cast<size_t>(i)] = count;
  }
  shrink_to_widest(taps, width);
  return taps;
}

ResampleTaps make_taps(int64_t in_size, const FilterAxis& w, int64_t out_size, Interpolation interpolation,
                       bool antialias) {
  return antialias ? pillow_taps(in_size, w, out_size, interpolation) : torch_taps(in_size, w, out_size, interpolation);
}

inline uint8_t clip8(int32_t sum) { return static_cast<uint8_t>(std::clamp(sum >> kResampleWeightBits, 0, 255)); }

// The horizontal pass's form of the column taps: every output reads exactly `width` pixels (the widest
// output's count), its first moved left where the row would end first and its weights moved right past
// zeros. The sums are the same integers; the inner loop gets a fixed trip count and no branch that the
// varying tap counts would mispredict.
struct RowFilter {
  std::vector<int32_t> first, weights;
  int32_t width = 0;
  int32_t extent = 0;  // the pixels the taps read are [0, extent)
};

// Takes any table resample_taps() makes, or a slice of one (whose max_taps may exceed all its counts).
RowFilter row_filter(const ResampleTaps& taps) {
  RowFilter f;
  const size_t n = taps.first.size(), stride = static_cast<size_t>(taps.max_taps);
  for (size_t i = 0; i < n; ++i) {
    f.width = std::max(f.width, taps.count[i]);
    f.extent = std::max(f.extent, taps.first[i] + taps.count[i]);
  }
  // extent >= width, as the widest output reads `width` pixels from first >= 0: no first goes below 0.
  const auto width = static_cast<size_t>(f.width);
  f.first.resize(n);
  f.weights.assign(n * width, 0);
  for (size_t i = 0; i < n; ++i) {
    f.first[i] = std::min(taps.first[i], f.extent - f.width);
    const auto shift = static_cast<size_t>(taps.first[i] - f.first[i]);
    std::copy_n(taps.weights.data() + i * stride, taps.count[i], f.weights.data() + i * width + shift);
  }
  return f;
}

// HorizontalPass: the horizontal pass, set up once per image from the column taps (allocates then). run()
// filters one source row (holding at least the pixels the taps read) into an output row, mirrored with
// `flip`; it does not allocate, and is not thread-safe (the SSE2 version copies into its scratch).
#if defined(__SSE2__)

// Note [horizontal pass in SSE2]
// SSE2 (every x86-64) has no 32-bit multiply, but pmaddwd multiplies int16 pairs and adds each pair
// into an int32. A weight k (|k| < 2^26) splits exactly into k = hi * 2^11 + lo with 0 <= lo < 2^11 and
// |hi| < 2^15, both int16. The taps go two at a time, the bytes of pixels t and t + 1 interleaved
// (R R' G G' B B' . .), so that each int32 lane sums one channel; hi_sum * 2^11 + lo_sum is then exactly
// the scalar sum (Pillow's int32, which never overflows). A 4-byte load reads one byte past its pixel,
// and an odd width's pairs one pixel past the filter (at weight 0): outputs that would read past the
// row read a zero-padded copy of its end. The saturating packs clamp to 0..255 as clip8() does. This
// is 1.3-1.5x the scalar loop's speed; the vertical pass needs none of it, as the compiler vectorises
// it well.
class HorizontalPass {
 public:
  HorizontalPass(const ResampleTaps& columns, bool flip) : flip_(flip) {
    const RowFilter f = row_filter(columns);
    first_ = f.first;
    pairs_ = (f.width + 1) / 2;
    const size_t n = first_.size(), width = static_cast<size_t>(f.width), pairs = static_cast<size_t>(pairs_);
    weights_.resize(n * pairs);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < pairs; ++j) {
        const int32_t* k = f.weights.data() + i * width + 2 * j;
        const int32_t k0 = k[0], k1 = 2 * j + 1 < width ? k[1] : 0;
        weights_[i * pairs + j] = {pair(static_cast<int16_t>(k0 >> 11), static_cast<int16_t>(k1 >> 11)),
                                   pair(static_cast<int16_t>(k0 & 0x7FF), static_cast<int16_t>(k1 & 0x7FF))};
      }
    }
    // Output i reads bytes up to 3 * (first[i] + 2 * pairs): within the row while that is below 3 * extent.
    const int32_t span = 2 * pairs_;
    extent_ = f.extent;
    tail_begin_ = std::max(extent_ - span - 1, 0);
    tail_from_ = static_cast<int64_t>(n);
    while (tail_from_ > 0 && first_[static_cast<size_t>(tail_from_ - 1)] + span >= extent_) --tail_from_;
    tail_.assign(static_cast<size_t>(3 * (extent_ - tail_begin_ + span) + 4), 0);
  }

  // One row of source pixels (at least extent) into the output row. Not thread-safe (the tail copy).
  void run(const uint8_t* in, uint8_t* out) {
    const auto n = static_cast<int64_t>(first_.size());
    std::memcpy(tail_.data(), in + 3 * static_cast<int64_t>(tail_begin_),
                static_cast<size_t>(3 * (extent_ - tail_begin_)));
    const __m128i zero = _mm_setzero_si128(), half = _mm_set1_epi32(kHalf);
    const PairWeights* w = weights_.data();
    uint8_t* o = out + (flip_ ? 3 * (n - 1) : 0);
    const int64_t step = flip_ ? -3 : 3;
    for (int64_t x = 0; x < n; ++x, o += step) {
      const int64_t first = first_[static_cast<size_t>(x)];
      const uint8_t* p = x < tail_from_ ? in + 3 * first : tail_.data() + 3 * (first - tail_begin_);
      __m128i hi = zero, lo = zero;
      for (int32_t j = 0; j < pairs_; ++j, p += 6, ++w) {
        const __m128i v = _mm_unpacklo_epi8(_mm_unpacklo_epi8(load_pixel(p), load_pixel(p + 3)), zero);
        hi = _mm_add_epi32(hi, _mm_madd_epi16(v, w->hi));
        lo = _mm_add_epi32(lo, _mm_madd_epi16(v, w->lo));
      }
      __m128i sum = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(hi, 11), lo), half);
      sum = _mm_srai_epi32(sum, kResampleWeightBits);
      sum = _mm_packus_epi16(_mm_packs_epi32(sum, sum), sum);
      const auto rgb = static_cast<uint32_t>(_mm_cvtsi128_si32(sum));
      o[0] = static_cast<uint8_t>(rgb);
      o[1] = static_cast<uint8_t>(rgb >> 8);
      o[2] = static_cast<uint8_t>(rgb >> 16);
    }
  }

 private:
  static __m128i pair(int16_t a, int16_t b) { return _mm_setr_epi16(a, b, a, b, a, b, a, b); }

  static __m128i load_pixel(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm_cvtsi32_si128(v);
  }

  struct PairWeights {
    __m128i hi, lo;  // two taps' weight halves, interleaved for pmaddwd
  };

  bool flip_;
  std::vector<int32_t> first_;
  std::vector<PairWeights> weights_;  // per output, per pair of taps
  int32_t pairs_ = 0;
  int32_t extent_ = 0, tail_begin_ = 0;
  int64_t tail_from_ = 0;      // outputs tail_from_.. read tail_, a copy of the row's pixels tail_begin_..
  std::vector<uint8_t> tail_;  // ..extent_, then zeros
};

#else

// One source row through the column filter into its pixels, mirrored with `flip`. W: the filter's width
// when known at compile time (the loop unrolled), else 0.
template <int W>
void horizontal_row(const uint8_t* __restrict__ in, const RowFilter& f, bool flip, uint8_t* __restrict__ out) {
  const auto n = static_cast<int64_t>(f.first.size());
  const int32_t width = W > 0 ? W : f.width;
  const int32_t* first = f.first.data();
  const int32_t* k = f.weights.data();
  uint8_t* o = out + (flip ? 3 * (n - 1) : 0);
  const int64_t step = flip ? -3 : 3;
  for (int64_t x = 0; x < n; ++x, k += width, o += step) {
    const uint8_t* p = in + 3 * static_cast<int64_t>(first[x]);
    int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
#pragma GCC unroll 8
    for (int32_t t = 0; t < width; ++t) {
      s0 += p[3 * t] * k[t];
      s1 += p[3 * t + 1] * k[t];
      s2 += p[3 * t + 2] * k[t];
    }
    o[0] = clip8(s0);
    o[1] = clip8(s1);
    o[2] = clip8(s2);
  }
}

class HorizontalPass {
 public:
  HorizontalPass(const ResampleTaps& columns, bool flip) : filter_(row_filter(columns)), flip_(flip) {
    switch (filter_.width) {
      case 1: row_ = horizontal_row<1>; break;
      case 2: row_ = horizontal_row<2>; break;
      case 3: row_ = horizontal_row<3>; break;
      case 4: row_ = horizontal_row<4>; break;
      case 5: row_ = horizontal_row<5>; break;
      case 6: row_ = horizontal_row<6>; break;
      case 7: row_ = horizontal_row<7>; break;
      case 8: row_ = horizontal_row<8>; break;
      default: row_ = horizontal_row<0>;
    }
  }

  void run(const uint8_t* in, uint8_t* out) { row_(in, filter_, flip_, out); }

 private:
  RowFilter filter_;
  bool flip_;
  void (*row_)(const uint8_t*, const RowFilter&, bool, uint8_t*) = nullptr;
};

#endif

// One output row of the vertical pass: `count` rows from `rows` (`stride` bytes apart), `values` bytes
// each, weighted by k. A block of kBlock sums stays in registers while every row adds to it; the fixed
// block size lets the compiler vectorise at -O2 too.
void vertical_row(const uint8_t* rows, int64_t stride, const int32_t* k, int32_t count, int64_t values,
                  uint8_t* __restrict__ out) {
  constexpr int64_t kBlock = 32;
  int64_t j = 0;
  for (; j + kBlock <= values; j += kBlock) {
    int32_t sum[kBlock];
    for (int64_t u = 0; u < kBlock; ++u) sum[u] = kHalf;
    for (int32_t t = 0; t < count; ++t) {
      const uint8_t* __restrict__ row = rows + t * stride + j;
      const int32_t w = k[t];
      for (int64_t u = 0; u < kBlock; ++u) sum[u] += row[u] * w;
    }
    for (int64_t u = 0; u < kBlock; ++u) out[j + u] = clip8(sum[u]);
  }
  for (; j < values; ++j) {
    int32_t sum = kHalf;
    for (int32_t t = 0; t < count; ++t) sum += rows[t * stride + j] * k[t];
    out[j] = clip8(sum);
  }
}

// Both passes: the horizontal one over the source rows that the vertical one reads (first[] never
// decreases), into uint8, then the vertical one.
void two_passes(const uint8_t* src, int64_t src_stride, const ResampleTaps& rows, const ResampleTaps& columns,
                uint8_t* out, bool flip) {
  const auto out_h = static_cast<int64_t>(rows.first.size());
  const int64_t out_values = static_cast<int64_t>(columns.first.size()) * 3;
  if (out_h == 0 || out_values == 0) return;
  HorizontalPass horizontal(columns, flip);
  const int64_t top = rows.first.front(), bottom = rows.first.back() + rows.count.back();
  const auto middle = std::unique_ptr<uint8_t[]>(new uint8_t[static_cast<size_t>((bottom - top) * out_values)]);
  for (int64_t y = top; y < bottom; ++y) horizontal.run(src + y * src_stride, middle.get() + (y - top) * out_values);
  for (int64_t y = 0; y < out_h; ++y) {
    vertical_row(middle.get() + (rows.first[y] - top) * out_values, out_values, rows.weights.data() + y * rows.max_taps,
                 rows.count[y], out_values, out + y * out_values);
  }
}

}  // namespace

ResampleTaps resample_taps(int64_t in_size, double box_begin, double box_end, int64_t out_size,
                           Interpolation interpolation, bool antialias) {
  return make_taps(in_size, axis_window(in_size, box_begin, box_end, out_size, antialias), out_size, interpolation,
                   antialias);
}

void resample_rgb_taps(const uint8_t* src, int64_t src_stride, const ResampleTaps& rows, const ResampleTaps& columns,
                       uint8_t* out, bool flip) {
  two_passes(src, src_stride, rows, columns, out, flip);
}

}  // namespace ferry::detail
