#include "ferry/stages/image_augment.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <oneapi/tbb/parallel_for.h>

#include "ferry/build_config.h"
#include "ferry/io/decoders/image_window.h"
#include "ferry/io/util/splitmix64.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/segment_copy.h"

namespace ferry {
namespace {

using detail::AugmentDraw;

// The two independent streams of a sample's draws (Note [image augment]).
constexpr uint64_t kCropStream = 1;
constexpr uint64_t kFlipStream = 2;

template <typename T>
void store(void* out, int64_t index, float value) {
  if constexpr (std::is_same_v<T, float>) {
    static_cast<float*>(out)[index] = value;
  } else {
    static_cast<T*>(out)[index] = T(value);  // c10::Half and c10::BFloat16 round to nearest even
  }
}

template <typename T>
void augment_sample(const uint8_t* image, const AugmentDraw& draw, const detail::AugmentShape& shape, void* out,
                    int64_t sample) {
  const int64_t plane = int64_t{shape.out_h} * shape.out_w;
  const int64_t first = sample * plane * 3;
  // Every row samples the same columns: their taps once per sample, not once per pixel.
  std::vector<detail::AugmentTap> columns(static_cast<size_t>(shape.out_w));
  for (int32_t x = 0; x < shape.out_w; ++x) {
    const int32_t from = draw.flip != 0 ? shape.out_w - 1 - x : x;
    columns[static_cast<size_t>(x)] = detail::augment_tap(from, draw.left, draw.width, shape.out_w);
  }
  for (int32_t y = 0; y < shape.out_h; ++y) {
    const detail::AugmentTap row = detail::augment_tap(y, draw.top, draw.height, shape.out_h);
    for (int32_t x = 0; x < shape.out_w; ++x) {
      const detail::AugmentTap& column = columns[static_cast<size_t>(x)];
      for (int c = 0; c < 3; ++c) {
        const float value = detail::augment_value(image, shape, row, column, c) * shape.scale[c] + shape.shift[c];
        const int64_t pixel = int64_t{y} * shape.out_w + x;
        store<T>(out, first + (shape.nchw != 0 ? c * plane + pixel : pixel * 3 + c), value);
      }
    }
  }
}

}  // namespace

ImageAugment::ImageAugment(const AugmentOptions& options, int64_t image_height, int64_t image_width)
    : options_(options) {
  PipelineOptions check;
  check.augment = options_;
  check.check();
  if (image_height < 1 || image_width < 1 || image_height > 65535 || image_width > 65535) {
    throw Error("augment: field '" + options_.field + "' is " + std::to_string(image_height) + " x " +
                std::to_string(image_width) + "; images of 1..65535 pixels a side can be augmented");
  }
  shape_.in_h = static_cast<int32_t>(image_height);
  shape_.in_w = static_cast<int32_t>(image_width);
  const bool resized = options_.crops() && options_.height > 0;
  shape_.out_h = static_cast<int32_t>(resized ? options_.height : image_height);
  shape_.out_w = static_cast<int32_t>(resized ? options_.width : image_width);
  shape_.dtype = static_cast<int32_t>(options_.dtype);
  shape_.nchw = options_.layout == AugmentOptions::Layout::kNCHW ? 1 : 0;
  for (int c = 0; c < 3; ++c) {
    // value / 255, then (value - mean) / std: one multiply and one add per element.
    const double deviation = options_.normalize ? options_.std[c] : 1.0;
    const double mean = options_.normalize ? options_.mean[c] : 0.0;
    shape_.scale[c] = static_cast<float>(1.0 / (255.0 * deviation));
    shape_.shift[c] = static_cast<float>(-mean / deviation);
  }
}

at::ScalarType ImageAugment::dtype() const noexcept {
  switch (options_.dtype) {
    case AugmentOptions::DType::kFloat16: return at::kHalf;
    case AugmentOptions::DType::kBFloat16: return at::kBFloat16;
    case AugmentOptions::DType::kFloat32: break;
  }
  return at::kFloat;
}

std::vector<int64_t> ImageAugment::shape(int64_t batch) const {
  if (shape_.nchw != 0) return {batch, 3, shape_.out_h, shape_.out_w};
  return {batch, shape_.out_h, shape_.out_w, 3};
}

size_t ImageAugment::bytes(int64_t batch) const noexcept {
  return static_cast<size_t>(batch) * 3 * static_cast<size_t>(shape_.out_h) * static_cast<size_t>(shape_.out_w) *
         c10::elementSize(dtype());
}

AugmentDraw ImageAugment::draw(uint64_t epoch, uint64_t sample) const noexcept {
  AugmentDraw draw{0, 0, shape_.in_h, shape_.in_w, 0};
  if (options_.flip > 0) {
    draw.flip = SampleStream(options_.seed, epoch, sample, kFlipStream).unit() < options_.flip ? 1 : 0;
  }
  if (!options_.crops()) return draw;
  // As the image decoders draw their random-resized crops (image_window.h).
  SampleStream random(options_.seed, epoch, sample, kCropStream);
  const detail::CropBox box = detail::draw_resized_crop(
      shape_.in_h, shape_.in_w, options_.scale_min, options_.scale_max, options_.ratio_min, options_.ratio_max, random);
  draw.top = static_cast<int32_t>(box.top);
  draw.left = static_cast<int32_t>(box.left);
  draw.height = static_cast<int32_t>(box.height);
  draw.width = static_cast<int32_t>(box.width);
  return draw;
}

std::vector<AugmentDraw> ImageAugment::draws(uint64_t epoch, std::span<const uint64_t> samples) const {
  std::vector<AugmentDraw> result;
  result.reserve(samples.size());
  for (uint64_t sample : samples) result.push_back(draw(epoch, sample));
  return result;
}

void ImageAugment::run_on_host(const uint8_t* images, std::span<const AugmentDraw> draws, void* out) const {
  const int64_t image_bytes = int64_t{shape_.in_h} * shape_.in_w * 3;
  tbb::parallel_for(size_t{0}, draws.size(), [&](size_t s) {
    const uint8_t* image = images + static_cast<int64_t>(s) * image_bytes;
    const auto sample = static_cast<int64_t>(s);
    switch (options_.dtype) {
      case AugmentOptions::DType::kFloat32: augment_sample<float>(image, draws[s], shape_, out, sample); break;
      case AugmentOptions::DType::kFloat16: augment_sample<c10::Half>(image, draws[s], shape_, out, sample); break;
      case AugmentOptions::DType::kBFloat16: augment_sample<c10::BFloat16>(image, draws[s], shape_, out, sample); break;
    }
  });
}

std::shared_ptr<const ImageAugment> make_image_augment(const AugmentOptions& options,
                                                       const std::vector<FieldSpec>& fields) {
  std::vector<std::string> names;
  for (const FieldSpec& spec : fields) {
    names.push_back(spec.name);
    if (spec.name != options.field) continue;
    if (spec.dtype != at::kByte || spec.shape.size() != 3 || spec.shape[2] != 3 || spec.shape[0] < 1 ||
        spec.shape[1] < 1) {
      throw Error("augment.field: field '" + options.field +
                  "' must be uint8 images of a fixed [H, W, 3] (decoded by jpeg, png or image, with resize_shorter "
                  "and crop where the files differ in size)");
    }
    return std::make_shared<const ImageAugment>(options, spec.shape[0], spec.shape[1]);
  }
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  throw Error("augment.field: the source has no field '" + options.field + "' (its fields: " + list + ")");
}

#if FERRY_SEGMENT_KERNEL
void ImageAugment::run_on_device(const uint8_t* images, std::span<const AugmentDraw> draws, void* out,
                                 CudaStreamHandle stream) const {
  const int64_t image_bytes = int64_t{shape_.in_h} * shape_.in_w * 3;
  const auto output_bytes = static_cast<int64_t>(bytes(1));
  for (size_t first = 0; first < draws.size(); first += detail::kAugmentDrawsPerLaunch) {
    const size_t count = std::min(detail::kAugmentDrawsPerLaunch, draws.size() - first);
    detail::launch_augment_kernel(images + static_cast<int64_t>(first) * image_bytes, draws.data() + first, count,
                                  shape_, static_cast<std::byte*>(out) + static_cast<int64_t>(first) * output_bytes,
                                  stream);
  }
}
#else
void ImageAugment::run_on_device(const uint8_t* /*images*/, std::span<const AugmentDraw> draws, void* /*out*/,
                                 CudaStreamHandle /*stream*/) const {
  if (draws.empty()) return;
  throw Error(std::string("augmenting on the device needs ferry's CUDA kernels, which this build lacks: ") +
              segment_kernel_reason());
}
#endif

}  // namespace ferry
