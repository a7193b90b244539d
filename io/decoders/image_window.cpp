#include "ferry/io/decoders/image_window.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ferry/io/util/dtype_names.h"
#include "ferry/io/util/splitmix64.h"
#include "ferry/pipeline/error.h"

namespace ferry::detail {
namespace {

std::string size_text(int64_t height, int64_t width) {
  return std::to_string(height) + "x" + std::to_string(width) + " (HxW)";
}

// Bilinear resize of a uint8 HWC RGB image, computing only a window of the resized image.
//
// Why this and not at::upsample_bilinear2d: that would convert to float CHW and back (three extra
// passes over the image and two allocations) and compute the whole resized image before the crop
// throws most of it away. Here each output pixel is computed once, from 11-bit fixed-point weights
// (OpenCV's choice: the error stays within one step of 255), and each source row is interpolated
// horizontally once and kept while two consecutive output rows need it. Sampling uses pixel centres
// (align_corners=False), as torch and OpenCV do. Plain two-tap bilinear aliases when shrinking by
// more than 2x; the decoders avoid that by shrinking first (TurboJPEG's DCT scaling, or
// shrink_by_blocks()), which leaves at most 2x for this step.
constexpr int kWeightBits = 11;
constexpr int32_t kWeightOne = 1 << kWeightBits;

// For each output coordinate of the window: the two source coordinates it lies between, and the
// weight of the second, out of kWeightOne.
struct Taps {
  std::vector<int32_t> first, second;
  std::vector<int32_t> weight;
};

Taps make_taps(int64_t source, int64_t resized, int64_t begin, int64_t count) {
  Taps taps;
  taps.first.resize(static_cast<size_t>(count));
  taps.second.resize(static_cast<size_t>(count));
  taps.weight.resize(static_cast<size_t>(count));
  const double scale = static_cast<double>(source) / static_cast<double>(resized);
  for (int64_t k = 0; k < count; ++k) {
    const double at = std::max((static_cast<double>(begin + k) + 0.5) * scale - 0.5, 0.0);
    int64_t index = static_cast<int64_t>(at);
    double fraction = at - static_cast<double>(index);
    if (index >= source - 1) {
      index = source - 1;
      fraction = 0;
    }
    const auto slot = static_cast<size_t>(k);
    taps.first[slot] = static_cast<int32_t>(index);
    taps.second[slot] = static_cast<int32_t>(std::min(index + 1, source - 1));
    taps.weight[slot] = static_cast<int32_t>(std::lround(fraction * kWeightOne));
  }
  return taps;
}

// One source row, interpolated at the window's columns: 3 values per pixel, each the weighted sum
// of two source values (so kWeightOne times too large).
void interpolate_row(const uint8_t* __restrict__ line, const Taps& cols, int32_t* __restrict__ into) {
  const int32_t* first = cols.first.data();
  const int32_t* second = cols.second.data();
  const int32_t* weight = cols.weight.data();
  const size_t count = cols.weight.size();
  for (size_t x = 0; x < count; ++x) {
    const uint8_t* a = line + 3 * first[x];
    const uint8_t* b = line + 3 * second[x];
    const int32_t wb = weight[x], wa = kWeightOne - wb;
    into[3 * x] = a[0] * wa + b[0] * wb;
    into[3 * x + 1] = a[1] * wa + b[1] * wb;
    into[3 * x + 2] = a[2] * wa + b[2] * wb;
  }
}

// Blends two interpolated rows into an output row.
void blend_rows(const int32_t* __restrict__ upper, const int32_t* __restrict__ lower, int32_t wb, size_t count,
                uint8_t* __restrict__ out) {
  constexpr int kShift = 2 * kWeightBits;
  constexpr int32_t kHalf = 1 << (kShift - 1);
  const int32_t wa = kWeightOne - wb;
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<uint8_t>((upper[i] * wa + lower[i] * wb + kHalf) >> kShift);
}

at::Tensor resize_window(const at::Tensor& image, const ImageWindow& g) {
  const int64_t source_h = image.size(0), source_w = image.size(1);
  const uint8_t* source = image.data_ptr<uint8_t>();
  const Taps rows = make_taps(source_h, g.resized_h, g.top, g.out_h);
  const Taps cols = make_taps(source_w, g.resized_w, g.left, g.out_w);

  at::Tensor out = at::empty({g.out_h, g.out_w, 3}, at::kByte);
  uint8_t* target = out.data_ptr<uint8_t>();
  const auto row_values = static_cast<size_t>(g.out_w * 3);
  std::vector<int32_t> buffers(2 * row_values);
  // Source rows only move down as the output row does: `upper` holds row cached[0], `lower` row
  // cached[1]; each source row is interpolated once.
  int32_t* upper = buffers.data();
  int32_t* lower = buffers.data() + row_values;
  int64_t cached[2] = {-1, -1};
  const auto line = [&](int64_t y) { return source + y * source_w * 3; };
  for (int64_t y = 0; y < g.out_h; ++y) {
    const auto slot = static_cast<size_t>(y);
    const int64_t ya = rows.first[slot], yb = rows.second[slot];
    if (cached[0] != ya) {
      if (cached[1] == ya) {
        std::swap(upper, lower);
        std::swap(cached[0], cached[1]);
      } else {
        interpolate_row(line(ya), cols, upper);
        cached[0] = ya;
      }
    }
    if (cached[1] != yb && yb != ya) {
      interpolate_row(line(yb), cols, lower);
      cached[1] = yb;
    }
    blend_rows(upper, yb == ya ? upper : lower, yb == ya ? 0 : rows.weight[slot], row_values, target + y * g.out_w * 3);
  }
  return out;
}

// Note [random crop]
// A random crop must not depend on which decode thread takes a sample or when, or a run could not
// be repeated or resumed. In a pipeline (decode_sample) the crop is drawn from the options' seed,
// the epoch and the sample's index: another crop every epoch, as augmentation wants, and the same
// ones on every run. A bare decode() call has no sample, so it draws from the seed and the encoded
// bytes: crop_key_of(data, size) digests every byte (8 at a time: ~20 us for 100 KB, against
// milliseconds of decoding); the same file then gets the same crop wherever it appears. Either way
// splitmix64 turns the key into the offsets, and different seeds give different crops. The digest
// reads the bytes as little-endian words, so it is the same on every machine ferry builds on. JPEG
// and PNG files draw their crops the same way.
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

}  // namespace

void check_image_options(const ImageDecodeOptions& options, std::string_view kind, const std::string& name) {
  if (name.empty()) throw Error(std::string(kind) + " decoder: the name must not be empty");
  const std::string self = std::string(kind) + " decoder '" + name + "': ";
  if (options.resize_shorter < 0) throw Error(self + "resize_shorter must be >= 0 (0: no resize)");
  if (options.crop_height < 0 || options.crop_width < 0) throw Error(self + "crop sizes must be >= 0 (0: no crop)");
  if ((options.crop_height == 0) != (options.crop_width == 0)) {
    throw Error(self + "set both crop_height and crop_width, or neither (got " + std::to_string(options.crop_height) +
                " and " + std::to_string(options.crop_width) + ")");
  }
}

void check_image_field(const FieldSpec& spec, std::string_view decoder) {
  if (spec.dtype != at::kByte || spec.shape.size() != 3 || spec.shape[2] != 3 || spec.shape[0] <= 0 ||
      spec.shape[1] <= 0) {
    std::string declared;
    for (const int64_t d : spec.shape)
      declared += (declared.empty() ? "" : ", ") + (d == kVariableLength ? "*" : std::to_string(d));
    throw Error("the " + std::string(decoder) + " decoder makes uint8 [H, W, 3] images; the field declares " +
                dtype_name(spec.dtype) + " [" + declared +
                "] (a fixed H and W are needed so that a batch stacks; set resize/crop options to get them)");
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
  ImageWindow g{height, width, 0, 0, height, width};
  if (options.resize_shorter > 0) {
    const int64_t r = options.resize_shorter;
    if (height <= width) {
      g.resized_h = r;
      g.resized_w = std::max<int64_t>(1, r * width / height);
    } else {
      g.resized_w = r;
      g.resized_h = std::max<int64_t>(1, r * height / width);
    }
  }
  g.out_h = g.resized_h;
  g.out_w = g.resized_w;
  if (options.crop_height > 0) {
    if (g.resized_h < options.crop_height || g.resized_w < options.crop_width) {
      throw Error(image +
                  (options.resize_shorter > 0 ? ", resized to " + size_text(g.resized_h, g.resized_w) + "," : "") +
                  " is smaller than the crop " + size_text(options.crop_height, options.crop_width) +
                  "; set resize_shorter to at least the larger crop side");
    }
    g.out_h = options.crop_height;
    g.out_w = options.crop_width;
    const int64_t spare_h = g.resized_h - g.out_h, spare_w = g.resized_w - g.out_w;
    if (options.crop == ImageDecodeOptions::Crop::kCenter) {
      g.top = spare_h / 2;
      g.left = spare_w / 2;
    } else {  // Note [random crop]; the key is made only here, so that a center crop never digests the bytes.
      const uint64_t crop_key =
          crop.context != nullptr ? crop_key_of(*crop.context) : crop_key_of(crop.data, crop.size);
      uint64_t state = options.seed ^ crop_key;
      g.top = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(spare_h + 1));
      g.left = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(spare_w + 1));
    }
  }
  if (g.out_h != spec.shape[0] || g.out_w != spec.shape[1]) {
    throw Error(image + " decodes to [" + std::to_string(g.out_h) + ", " + std::to_string(g.out_w) +
                ", 3] but the field declares [" + std::to_string(spec.shape[0]) + ", " + std::to_string(spec.shape[1]) +
                ", 3]; set the field's resize_shorter and crop (in YAML), or give it a decoder with resize_shorter "
                "and crop_height/crop_width, so that every image comes out at the declared size");
  }
  return g;
}

at::Tensor shrink_by_blocks(const at::Tensor& image, int64_t factor) {
  const int64_t height = image.size(0) / factor, width = image.size(1) / factor, source_w = image.size(1);
  at::Tensor out = at::empty({height, width, 3}, at::kByte);
  const uint8_t* source = image.data_ptr<uint8_t>();
  uint8_t* target = out.data_ptr<uint8_t>();
  const auto area = static_cast<uint32_t>(factor * factor);
  std::vector<uint32_t> sums(static_cast<size_t>(width * 3));
  for (int64_t y = 0; y < height; ++y) {
    std::fill(sums.begin(), sums.end(), 0u);
    for (int64_t dy = 0; dy < factor; ++dy) {
      const uint8_t* line = source + (y * factor + dy) * source_w * 3;
      for (int64_t x = 0; x < width; ++x) {
        for (int64_t dx = 0; dx < factor; ++dx) {
          const uint8_t* pixel = line + (x * factor + dx) * 3;
          uint32_t* sum = &sums[static_cast<size_t>(x * 3)];
          sum[0] += pixel[0];
          sum[1] += pixel[1];
          sum[2] += pixel[2];
        }
      }
    }
    uint8_t* row = target + y * width * 3;
    for (size_t i = 0; i < sums.size(); ++i) row[i] = static_cast<uint8_t>((sums[i] + area / 2) / area);
  }
  return out;
}

at::Tensor cut_window(const at::Tensor& image, const ImageWindow& g) {
  if (image.size(0) == g.resized_h && image.size(1) == g.resized_w) {
    if (g.out_h == g.resized_h && g.out_w == g.resized_w) return image;
    return image.slice(0, g.top, g.top + g.out_h).slice(1, g.left, g.left + g.out_w).contiguous();
  }
  return resize_window(image, g);
}

}  // namespace ferry::detail
