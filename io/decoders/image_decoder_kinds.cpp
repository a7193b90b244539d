// The image decoders as a config names them: jpeg, png, webp and image (any of them, by the bytes), with
// the keys of torchvision's geometry (resize_shorter, crop, flip, interpolation) and, for jpeg, where it
// decodes.
#include <algorithm>

#include "ferry/io/decoders/builtin_decoder_kinds.h"
#include "ferry/io/decoders/image_decoder.h"
#include "ferry/io/decoders/jpeg_decoder.h"
#include "ferry/io/decoders/png_decoder.h"
#include "ferry/io/decoders/webp_decoder.h"
#include "ferry/pipeline/error.h"

namespace ferry {

const char* decode_device_name(ImageDecodeOptions::Device device) noexcept {
  switch (device) {
    case ImageDecodeOptions::Device::kCpu: return "cpu";
    case ImageDecodeOptions::Device::kGpu: return "gpu";
    case ImageDecodeOptions::Device::kAuto: return "auto";
  }
  return "unknown";
}

namespace {

using Type = KeySpec::Type;

KeySpec pair_key(std::string name, std::string description, std::string default_value, std::string example,
                 std::optional<double> max) {
  return {.name = std::move(name),
          .type = Type::kList,
          .description = std::move(description),
          .default_value = std::move(default_value),
          .example = std::move(example),
          .min = 2,
          .max = 2,
          .item = {{.type = Type::kNumber, .min = 0, .max = max}},
          .expected = "[min, max]",
          .type_text = "[min, max]"};
}

std::vector<KeySpec> size_keys() {
  return {
      {.name = "resize_shorter",
       .type = Type::kInteger,
       .description = "Resize each image so that its shorter side has this many pixels, keeping the aspect ratio "
                      "(torchvision's Resize(int)), before the crop.",
       .default_value = "none",
       .example = "256",
       .min = 1,
       .max = 65535,
       .expected = "an integer in 1..65535 (pixels)"},
      {.name = "crop",
       .type = Type::kChoice,
       .description = "How the field's [H, W] is cut: center (torchvision's CenterCrop of the resized image), random "
                      "(a RandomCrop of it), random_resized (torchvision's RandomResizedCrop: a window of the whole "
                      "image drawn by `scale` and `ratio`, resized to [H, W]; no resize_shorter). Random choices "
                      "are drawn from `sampler.seed`, the epoch and the sample: another crop every epoch, the same "
                      "on every run and resume. Without resize_shorter and crop every image must already be [H, W] "
                      "(or the field [null, null, 3]: each image its own size).",
       .default_value = "center",
       .example = "random_resized",
       .choices = {"center", "random", "random_resized"}},
      pair_key("scale", "random_resized: the range of the window's share of the image's area.", "[0.08, 1.0]",
               "[0.25, 1.0]", 1.0),
      pair_key("ratio", "random_resized: the range of the window's aspect ratio (width / height), drawn log-uniformly.",
               "[0.75, 1.3333]", "[0.5, 2.0]", std::nullopt),
      {.name = "flip",
       .type = Type::kNumber,
       .description = "The probability that an image is flipped left to right (after the crop; torchvision's "
                      "RandomHorizontalFlip), drawn as the crop is.",
       .default_value = "0",
       .example = "0.5",
       .min = 0,
       .max = 1},
      {.name = "interpolation",
       .type = Type::kChoice,
       .description = "The resampling filter of the resize: bilinear or bicubic, as Pillow and torchvision's "
                      "antialiased resize compute them.",
       .default_value = "bilinear",
       .example = "bicubic",
       .choices = {"bilinear", "bicubic"}},
      {.name = "antialias",
       .type = Type::kBoolean,
       .description = "Widen the filter when shrinking, as Pillow and torchvision (antialias=True) do; without it a "
                      "shrink by more than 2x aliases.",
       .default_value = "true",
       .example = "false"},
      {.name = "window",
       .type = Type::kBoolean,
       .description = "Also give the field `<field>_window`: float32 [9] per sample, the region of the image the "
                      "output shows (top, left, height, width, in the image's pixels), flipped (1) or not (0), the "
                      "image's height and width, the output's height and width. The `boxes` transform moves box "
                      "targets with it.",
       .default_value = "false",
       .example = "true"},
  };
}

KeySpec device_key() {
  return {.name = "device",
          .type = Type::kChoice,
          .description =
              "Where the JPEGs are decoded: cpu (libjpeg-turbo on the decode threads), gpu (nvJPEG's "
              "hardware decoder on the delivery GPU; the images it cannot decode on the CPU), auto (the CPU "
              "threads while the GPU decoder starts, then whichever of the two decoded faster, as measured; "
              "the CPU alone where the build has no nvJPEG).",
          .default_value = "cpu",
          .example = "auto",
          .choices = {"cpu", "gpu", "auto"}};
}

KeySpec dct_scaling_key() {
  return {.name = "dct_scaling",
          .type = Type::kBoolean,
          .description =
              "Decode large JPEGs at 1/2, 1/4 or 1/8 of their size in the DCT domain where the resize "
              "shrinks them that much: several times faster for large photos, but no longer the pixels "
              "of resizing the full image (torchvision's), by a level or two.",
          .default_value = "false",
          .example = "true"};
}

std::string shape_text(const KeyValue& shape) {
  std::string text;
  for (const KeyValue& size : shape.items()) text += (text.empty() ? "" : ", ") + size.text();
  return "[" + text + "]";
}

// A shape's size: kVariableLength for null (`[null, null, 3]`: each image its own size).
int64_t side_of(const KeyValue& size) { return size.is_null() ? kVariableLength : size.integer(); }

// The checks of a field an image decoder decodes: uint8, [H, W, 3] with a fixed H and W (the size every
// image is made) or both any, a resize that leaves every image large enough for the crop, and keys that
// go together.
void check_image_field(const std::string& decoder, const KeyValue& field, KeyProblems& problems) {
  if (const KeyValue* dtype = field.find("dtype"); dtype != nullptr && dtype->text() != "uint8") {
    problems.add(*dtype, "the " + decoder + " decoder makes uint8 images, found " + dtype->text());
  }
  const KeyValue* shape = field.find("shape");
  if (shape == nullptr) {
    problems.add(field.key() + ".shape", field,
                 "missing required key: the " + decoder +
                     " decoder makes images of a fixed [H, W, 3], e.g. [224, 224, 3], or of their own size, "
                     "[null, null, 3]");
    return;
  }
  const std::vector<KeyValue>& sizes = shape->items();
  if (sizes.size() != 3 || side_of(sizes[0]) == 0 || side_of(sizes[1]) == 0 || sizes[2].is_null() ||
      sizes[2].integer() != 3 || sizes[0].is_null() != sizes[1].is_null()) {
    problems.add(*shape, "the " + decoder +
                             " decoder makes [H, W, 3] images (H, W >= 1, or both null for images of "
                             "their own size), found " +
                             shape_text(*shape));
    return;
  }
  const KeyValue* resize = field.find("resize_shorter");
  const KeyValue* crop = field.find("crop");
  const std::string crop_kind = crop != nullptr ? crop->text() : "";
  if (sizes[0].is_null()) {
    if (crop != nullptr) {
      problems.add(*crop, "a crop makes every image the field's [H, W]; the field's shape " + shape_text(*shape) +
                              " keeps each image's own size: give the shape the crop's size, e.g. [224, 224, 3]");
    }
    return;
  }
  if (crop_kind == "random_resized") {
    if (resize != nullptr) {
      problems.add(*resize,
                   "crop: random_resized draws its window from the whole image and resizes it to [H, W]: "
                   "leave resize_shorter out");
    }
  } else {
    for (const char* key : {"scale", "ratio"}) {
      if (const KeyValue* value = field.find(key)) {
        problems.add(*value, std::string(key) + " is for crop: random_resized (the crop here is " +
                                 (crop_kind.empty() ? std::string("center") : crop_kind) + ")");
      }
    }
  }
  for (const char* key : {"scale", "ratio"}) {
    const KeyValue* range = field.find(key);
    if (range != nullptr && range->items().size() == 2 && range->items()[0].number() > range->items()[1].number()) {
      problems.add(*range, std::string(key) + " is [min, max]: its first value must not exceed the second");
    }
    if (range != nullptr && std::string(key) == "scale" && range->items().size() == 2 &&
        range->items()[0].number() <= 0) {
      problems.add(*range, "scale's share of the area must be > 0");
    }
    if (range != nullptr && std::string(key) == "ratio" && range->items().size() == 2 &&
        range->items()[0].number() <= 0) {
      problems.add(*range, "ratio (width / height) must be > 0");
    }
  }
  // After the resize every image's shorter side is resize_shorter, so only a crop no larger than that
  // fits every image (a portrait and a landscape one alike); a larger one fails on some sample.
  const int64_t height = sizes[0].integer();
  const int64_t width = sizes[1].integer();
  const int64_t needed = std::max(height, width);
  if (resize != nullptr && crop_kind != "random_resized" && resize->integer() < needed) {
    problems.add(*resize, "resize_shorter " + std::to_string(resize->integer()) + " is smaller than the crop [" +
                              std::to_string(height) + ", " + std::to_string(width) + "] (" + shape->key() +
                              "): each image's shorter side becomes " + std::to_string(resize->integer()) +
                              " pixels, so the crop does not fit; use resize_shorter >= " + std::to_string(needed) +
                              ", or crop: random_resized");
  }
}

// The options a field's keys give an image decoder. Neither resize_shorter nor crop: the image is
// taken as it is, so every image must already be the field's [H, W] (or any size, for [null, null, 3]).
ImageDecodeOptions image_options(const DecoderArgs& args) {
  ImageDecodeOptions options;
  options.seed = args.seed;
  const KeyValue* resize = args.keys.find("resize_shorter");
  const KeyValue* crop = args.keys.find("crop");
  const std::vector<int64_t>& shape = args.field.shape;
  const bool any_size = shape.size() == 3 && shape[0] == kVariableLength;
  options.resize_shorter = resize != nullptr ? resize->integer() : 0;
  if (crop != nullptr || (resize != nullptr && !any_size)) {
    if (shape.size() != 3 || shape[0] <= 0 || shape[1] <= 0 || shape[2] != 3) {
      throw Error("field '" + args.field.name + "': a crop needs the field's shape to be [H, W, 3] (the crop's size)");
    }
    options.crop_height = shape[0];
    options.crop_width = shape[1];
    const std::string kind = crop != nullptr ? crop->text() : "center";
    options.crop = kind == "random"           ? ImageDecodeOptions::Crop::kRandom
                   : kind == "random_resized" ? ImageDecodeOptions::Crop::kRandomResized
                                              : ImageDecodeOptions::Crop::kCenter;
  }
  if (const KeyValue* scale = args.keys.find("scale")) {
    options.scale_min = scale->items().at(0).number();
    options.scale_max = scale->items().at(1).number();
  }
  if (const KeyValue* ratio = args.keys.find("ratio")) {
    options.ratio_min = ratio->items().at(0).number();
    options.ratio_max = ratio->items().at(1).number();
  }
  options.flip = args.keys.number_or("flip", 0.0);
  options.interpolation = args.keys.text_or("interpolation", "bilinear") == "bicubic"
                              ? ImageDecodeOptions::Interpolation::kBicubic
                              : ImageDecodeOptions::Interpolation::kBilinear;
  options.antialias = args.keys.boolean_or("antialias", true);
  options.window = args.keys.boolean_or("window", false);
  options.dct_scaling = args.keys.boolean_or("dct_scaling", false);
  if (const KeyValue* device = args.keys.find("device")) {
    options.device = device->text() == "gpu"    ? ImageDecodeOptions::Device::kGpu
                     : device->text() == "auto" ? ImageDecodeOptions::Device::kAuto
                                                : ImageDecodeOptions::Device::kCpu;
  }
  return options;
}

template <typename ImageDecoderType>
DecoderKind image_kind(std::string name, std::string description, std::vector<KeySpec> keys) {
  DecoderKind kind;
  kind.name = name;
  kind.description = std::move(description);
  kind.keys = std::move(keys);
  kind.make = [](const DecoderArgs& args) -> std::shared_ptr<const Decoder> {
    return std::make_shared<ImageDecoderType>(image_options(args));
  };
  kind.check = [name](const KeyValue& field, KeyProblems& problems) { check_image_field(name, field, problems); };
  return kind;
}

}  // namespace

namespace detail {

DecoderKind jpeg_decoder_kind() {
  std::vector<KeySpec> keys = size_keys();
  keys.push_back(dct_scaling_key());
  keys.push_back(device_key());
  return image_kind<JpegDecoder>("jpeg",
                                 "A JPEG file's bytes (RGB, grayscale, CMYK or YCCK) to a uint8 RGB image of the "
                                 "field's [H, W, 3] (libjpeg-turbo, or nvJPEG's hardware decoder with `device`).",
                                 std::move(keys));
}

DecoderKind png_decoder_kind() {
  return image_kind<PngDecoder>("png", "A PNG file's bytes to a uint8 RGB image of the field's [H, W, 3] (libpng).",
                                size_keys());
}

DecoderKind webp_decoder_kind() {
  return image_kind<WebpDecoder>(
      "webp", "A still WebP file's bytes (lossy or lossless) to a uint8 RGB image of the field's [H, W, 3] (libwebp).",
      size_keys());
}

DecoderKind image_decoder_kind() {
  return image_kind<ImageDecoder>(
      "image", "A JPEG, PNG or WebP file, told apart by its bytes, to a uint8 RGB image of the field's [H, W, 3].",
      size_keys());
}

}  // namespace detail
}  // namespace ferry
