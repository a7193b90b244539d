#include "ferry/io/decoders/image_window.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"

namespace ferry::detail {
namespace {

std::string size_text(int64_t height, int64_t width) {
  return std::to_string(height) + "x" + std::to_string(width) + " (HxW)";
}

// Python's round(): to the nearest integer, ties to even (the default rounding mode).
int64_t round_even(double value) { return static_cast<int64_t>(std::nearbyint(value)); }

// The independent streams of an image's random choices.
constexpr uint64_t kResizedCropStream = 1;
constexpr uint64_t kFlipStream = 2;

// Note [random crop]
// A random choice must not depend on which decode thread takes a sample or when, or a run could not
// be repeated or resumed. In a pipeline (decode_sample) it is drawn from the options' seed, the epoch
// and the sample's index: another crop every epoch, as augmentation wants, and the same ones on every
// run. A bare decode() call has no sample, so it draws from the seed and the encoded bytes:
// crop_key_of(data, size) digests every byte (8 at a time: ~20 us for 100 KB, against milliseconds of
// decoding); the same file then gets the same crop wherever it appears. The `crop: random` offsets come
// from splitmix64 seeded by the key; random-resized crops and flips from a SampleStream of (seed,
// epoch, sample) (or of (seed, 0, the bytes' digest)), one stream each. The digest reads the bytes as
// little-endian words, so it is the same on every machine ferry builds on. All image formats draw alike.
uint64_t crop_key_of(const DecodeContext& context) {
  // Two splitmix64 rounds keep (epoch, index) and (index, epoch) apart.
  uint64_t state = context.epoch;
  const uint64_t epoch_key = splitmix64(state);
  state = epoch_key ^ context.index;
  return splitmix64(state);
}

uint64_t crop_key_of(const uint8_t* data, int64_t size) {
  uint64_t h = 0x243F6A8885A308D3ULL ^ static_cast<uint64_t>(size);
  int64_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, data + i, 8);
    h = (h ^ word) * 0xFF51AFD7ED558CCDULL;
    h ^= h >> 32;
  }
  uint64_t tail = 0;
  for (int shift = 0; i < size; ++i, shift += 8) tail |= static_cast<uint64_t>(data[i]) << shift;
  h = (h ^ tail) * 0xC4CEB9FE1A85EC53ULL;
  return splitmix64(h);
}

SampleStream stream_of(const ImageDecodeOptions& options, const CropSource& source, uint64_t which) {
  if (source.context != nullptr) return SampleStream(options.seed, source.context->epoch, source.context->index, which);
  return SampleStream(options.seed, 0, crop_key_of(source.data, source.size), which);
}

// The axis of `size` pixels resized to `resized`, of which `count` from `first` are kept.
AxisWindow resized_axis(int64_t size, int64_t resized, int64_t first, int64_t count) {
  return {0.0, static_cast<double>(size), resized, first, count};
}

// `taps` of the pixels [first, first + count) only.
ResampleTaps slice_taps(ResampleTaps taps, int64_t first, int64_t count) {
  const auto begin = static_cast<size_t>(first), end = static_cast<size_t>(first + count);
  const auto width = static_cast<size_t>(taps.max_taps);
  taps.first = std::vector<int32_t>(taps.first.begin() + begin, taps.first.begin() + end);
  taps.count = std::vector<int32_t>(taps.count.begin() + begin, taps.count.begin() + end);
  taps.weights = std::vector<int32_t>(taps.weights.begin() + begin * width, taps.weights.begin() + end * width);
  return taps;
}

Interpolation interpolation_of(const ImageDecodeOptions& options) {
  return options.interpolation == ImageDecodeOptions::Interpolation::kBicubic ? Interpolation::kBicubic
                                                                              : Interpolation::kBilinear;
}

}  // namespace

CropBox draw_resized_crop(int64_t height, int64_t width, double scale_min, double scale_max, double ratio_min,
                          double ratio_max, SampleStream& random) {
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_min = std::log(ratio_min), log_max = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * random.uniform(scale_min, scale_max);
    const double aspect = std::exp(random.uniform(log_min, log_max));
    const int64_t w = round_even(std::sqrt(target * aspect));
    const int64_t h = round_even(std::sqrt(target / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int64_t top = random.up_to(height - h);
      const int64_t left = random.up_to(width - w);
      return {top, left, h, w};
    }
  }
  // The fallback: a central window, its ratio clamped to the range.
  const double ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (ratio < ratio_min) {
    h = std::clamp<int64_t>(round_even(static_cast<double>(w) / ratio_min), 1, height);
  } else if (ratio > ratio_max) {
    w = std::clamp<int64_t>(round_even(static_cast<double>(h) * ratio_max), 1, width);
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

void check_image_options(const ImageDecodeOptions& options, std::string_view kind, const std::string& name) {
  if (name.empty()) throw Error(std::string(kind) + " decoder: the name must not be empty");
  const std::string self = std::string(kind) + " decoder '" + name + "': ";
  if (options.resize_shorter < 0) throw Error(self + "resize_shorter must be >= 0 (0: no resize)");
  if (options.crop_height < 0 || options.crop_width < 0) throw Error(self + "crop sizes must be >= 0 (0: no crop)");
  if ((options.crop_height == 0) != (options.crop_width == 0)) {
    throw Error(self + "set both crop_height and crop_width, or neither (got " + std::to_string(options.crop_height) +
                " and " + std::to_string(options.crop_width) + ")");
  }
  if (options.crop == ImageDecodeOptions::Crop::kRandomResized) {
    if (options.crop_height == 0) throw Error(self + "a random resized crop needs its output size (crop_height/width)");
    if (options.resize_shorter > 0) {
      throw Error(self +
                  "a random resized crop is drawn from the whole image and resized to the crop's size: leave "
                  "resize_shorter out");
    }
    if (!(options.scale_min > 0 && options.scale_min <= options.scale_max && options.scale_max <= 1)) {
      throw Error(self + "scale must be [min, max] with 0 < min <= max <= 1, got [" +
                  std::to_string(options.scale_min) + ", " + std::to_string(options.scale_max) + "]");
    }
    if (!(options.ratio_min > 0 && options.ratio_min <= options.ratio_max && std::isfinite(options.ratio_max))) {
      throw Error(self + "ratio must be [min, max] with 0 < min <= max, got [" + std::to_string(options.ratio_min) +
                  ", " + std::to_string(options.ratio_max) + "]");
    }
  }
  if (!(options.flip >= 0 && options.flip <= 1)) {
    throw Error(self + "flip is a probability in 0..1, got " + std::to_string(options.flip));
  }
}

void check_image_field(const FieldSpec& spec, std::string_view decoder) {
  const auto side = [](int64_t d) { return d > 0 || d == kVariableLength; };
  if (spec.dtype != at::kByte || spec.shape.size() != 3 || spec.shape[2] != 3 || !side(spec.shape[0]) ||
      !side(spec.shape[1]) || (spec.shape[0] == kVariableLength) != (spec.shape[1] == kVariableLength)) {
    std::string declared;
    for (const int64_t d : spec.shape)
      declared += (declared.empty() ? "" : ", ") + (d == kVariableLength ? "*" : std::to_string(d));
    throw Error("the " + std::string(decoder) + " decoder makes uint8 [H, W, 3] images; the field declares " +
                dtype_name(spec.dtype) + " [" + declared +
                "] (a fixed H and W so that a batch stacks, with resize/crop options to get them; or both any, "
                "[null, null, 3], for images of their own size)");
  }
}

at::Tensor encoded_image_bytes(const at::Tensor& encoded, const FieldSpec& spec, std::string_view decoder,
                               std::string_view format) {
  check_image_field(spec, decoder);
  if (encoded.scalar_type() != at::kByte) {
    throw Error(std::string(decoder) + " data must be uint8 bytes, found " + dtype_name(encoded.scalar_type()));
  }
  if (encoded.numel() == 0) throw Error("empty " + std::string(format) + " (0 bytes)");
  return encoded.is_contiguous() ? encoded : encoded.contiguous();
}

ImageWindow plan_image_window(std::string_view format, int64_t height, int64_t width, const ImageDecodeOptions& options,
                              const CropSource& crop, const FieldSpec& spec) {
  const std::string image = std::string(format) + " of " + size_text(height, width);
  ImageWindow g;
  g.height = height;
  g.width = width;
  if (options.crop == ImageDecodeOptions::Crop::kRandomResized) {
    SampleStream random = stream_of(options, crop, kResizedCropStream);
    const CropBox box = draw_resized_crop(height, width, options.scale_min, options.scale_max, options.ratio_min,
                                          options.ratio_max, random);
    g.rows = {static_cast<double>(box.top), static_cast<double>(box.top + box.height), options.crop_height, 0,
              options.crop_height};
    g.columns = {static_cast<double>(box.left), static_cast<double>(box.left + box.width), options.crop_width, 0,
                 options.crop_width};
  } else {
    int64_t resized_h = height, resized_w = width;
    if (options.resize_shorter > 0) {
      const int64_t r = options.resize_shorter;
      if (height <= width) {
        resized_h = r;
        resized_w = std::max<int64_t>(1, r * width / height);
      } else {
        resized_w = r;
        resized_h = std::max<int64_t>(1, r * height / width);
      }
    }
    int64_t top = 0, left = 0, out_h = resized_h, out_w = resized_w;
    if (options.crop_height > 0) {
      if (resized_h < options.crop_height || resized_w < options.crop_width) {
        throw Error(image +
                    (options.resize_shorter > 0 ? ", resized to " + size_text(resized_h, resized_w) + "," : "") +
                    " is smaller than the crop " + size_text(options.crop_height, options.crop_width) +
                    "; set resize_shorter to at least the larger crop side, or use crop: random_resized");
      }
      out_h = options.crop_height;
      out_w = options.crop_width;
      const int64_t spare_h = resized_h - out_h, spare_w = resized_w - out_w;
      if (options.crop == ImageDecodeOptions::Crop::kCenter) {
        top = round_even(static_cast<double>(spare_h) / 2.0);
        left = round_even(static_cast<double>(spare_w) / 2.0);
      } else {  // Note [random crop]; the key is made only here, so that a center crop never digests the bytes.
        const uint64_t crop_key =
            crop.context != nullptr ? crop_key_of(*crop.context) : crop_key_of(crop.data, crop.size);
        uint64_t state = options.seed ^ crop_key;
        top = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(spare_h + 1));
        left = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(spare_w + 1));
      }
    }
    g.rows = resized_axis(height, resized_h, top, out_h);
    g.columns = resized_axis(width, resized_w, left, out_w);
  }
  if (options.flip > 0) g.flip = stream_of(options, crop, kFlipStream).unit() < options.flip;
  const bool any_size = spec.shape[0] == kVariableLength;
  if (!any_size && (g.out_h() != spec.shape[0] || g.out_w() != spec.shape[1])) {
    throw Error(image + " decodes to [" + std::to_string(g.out_h()) + ", " + std::to_string(g.out_w()) +
                ", 3] but the field declares [" + std::to_string(spec.shape[0]) + ", " + std::to_string(spec.shape[1]) +
                ", 3]; set the field's resize_shorter and crop (in YAML), or give it a decoder with resize_shorter "
                "and crop_height/crop_width, so that every image comes out at the declared size (or declare "
                "[null, null, 3] for images of their own size)");
  }
  return g;
}

WindowTaps window_taps(const ImageWindow& g, int64_t source_h, int64_t source_w, const ImageDecodeOptions& options) {
  // A DCT-scaled decode is smaller than the image by the same factor on both axes: the window's region
  // scales with it.
  const double scale_h = static_cast<double>(source_h) / static_cast<double>(g.height);
  const double scale_w = static_cast<double>(source_w) / static_cast<double>(g.width);
  const Interpolation filter = interpolation_of(options);
  const auto axis = [&](int64_t source, const AxisWindow& w, double scale) {
    // torchvision crops the region out first (a resized crop), so pixels beside it do not reach its
    // edges: the taps of the region alone, moved to where it lies. A resize of the whole image, then a
    // crop: the taps of the whole grid, of which the kept ones.
    const double begin = std::min(w.begin * scale, static_cast<double>(source));
    const double end = std::min(w.end * scale, static_cast<double>(source));
    const auto low = static_cast<int64_t>(std::floor(begin));
    const int64_t high = std::min(source, static_cast<int64_t>(std::ceil(end)));
    ResampleTaps taps = resample_taps(high - low, begin - static_cast<double>(low), end - static_cast<double>(low),
                                      w.grid, filter, options.antialias);
    for (int32_t& first : taps.first) first += static_cast<int32_t>(low);
    return slice_taps(std::move(taps), w.first, w.count);
  };
  return {axis(source_h, g.rows, scale_h), axis(source_w, g.columns, scale_w)};
}

bool whole_image(const ImageWindow& g) noexcept {
  const auto whole = [](const AxisWindow& w, int64_t size) {
    return w.begin == 0 && w.end == static_cast<double>(size) && w.grid == size && w.first == 0 && w.count == size;
  };
  return whole(g.rows, g.height) && whole(g.columns, g.width) && !g.flip;
}

at::Tensor resample_window(const at::Tensor& image, const ImageWindow& g, const ImageDecodeOptions& options) {
  const int64_t source_h = image.size(0), source_w = image.size(1);
  if (source_h == g.height && source_w == g.width && whole_image(g)) return image;
  // A crop without a resize (an image already of the resized size, say) is a slice: its taps would copy.
  const auto copies = [](const AxisWindow& w) {
    return w.end - w.begin == static_cast<double>(w.grid) && w.begin == std::floor(w.begin);
  };
  if (source_h == g.height && source_w == g.width && copies(g.rows) && copies(g.columns)) {
    const auto top = static_cast<int64_t>(g.rows.begin) + g.rows.first;
    const auto left = static_cast<int64_t>(g.columns.begin) + g.columns.first;
    at::Tensor window = image.slice(0, top, top + g.out_h()).slice(1, left, left + g.out_w());
    return (g.flip ? window.flip({1}) : window).contiguous();
  }
  const WindowTaps taps = window_taps(g, source_h, source_w, options);
  at::Tensor out = at::empty({g.out_h(), g.out_w(), 3}, at::kByte);
  resample_rgb_taps(image.data_ptr<uint8_t>(), source_w * 3, taps.rows, taps.columns, out.data_ptr<uint8_t>(), g.flip);
  return out;
}

at::Tensor window_values(const ImageWindow& g) {
  at::Tensor values = at::empty({kWindowValues}, at::kFloat);
  float* v = values.data_ptr<float>();
  v[0] = static_cast<float>(g.rows.shown_begin());
  v[1] = static_cast<float>(g.columns.shown_begin());
  v[2] = static_cast<float>(g.rows.shown_size());
  v[3] = static_cast<float>(g.columns.shown_size());
  v[4] = g.flip ? 1.0f : 0.0f;
  v[5] = static_cast<float>(g.height);
  v[6] = static_cast<float>(g.width);
  v[7] = static_cast<float>(g.out_h());
  v[8] = static_cast<float>(g.out_w());
  return values;
}

FieldSpec window_field(const FieldSpec& image) {
  return FieldSpec{.name = image.name + "_window", .dtype = at::kFloat, .shape = {kWindowValues}};
}

std::vector<FieldSpec> image_companions(const ImageDecodeOptions& options, const FieldSpec& spec) {
  if (!options.window) return {};
  return {window_field(spec)};
}

void report_window(const ImageDecodeOptions& options, const ImageWindow& window, const DecodeContext* context) {
  if (options.window && context != nullptr && context->companions != nullptr) {
    context->companions->push_back(window_values(window));
  }
}

}  // namespace ferry::detail
