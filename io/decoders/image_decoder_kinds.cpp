// The image decoders as a config names them: jpeg, png and image (either, by the bytes), with the keys
// that make every image of a field one size (resize_shorter, crop) and, for jpeg, where it decodes.
#include <algorithm>

#include "ferry/io/decoders/builtin_decoder_kinds.h"
#include "ferry/io/decoders/image_decoder.h"
#include "ferry/io/decoders/jpeg_decoder.h"
#include "ferry/io/decoders/png_decoder.h"
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

std::vector<KeySpec> size_keys() {
  return {
      {.name = "resize_shorter",
       .type = Type::kInteger,
       .description = "Resize each image so that its shorter side has this many pixels, keeping the aspect ratio, "
                      "before the crop.",
       .default_value = "none",
       .example = "256",
       .min = 1,
       .max = 65535,
       .expected = "an integer in 1..65535 (pixels)"},
      {.name = "crop",
       .type = Type::kChoice,
       .description = "Where the crop of the field's [H, W] is taken from the (resized) image; random: drawn from "
                      "`sampler.seed`, the epoch and the sample, so an image gets another crop every epoch and a run "
                      "(or a resume) repeats exactly. Without resize_shorter and crop every image must already be "
                      "[H, W].",
       .default_value = "center",
       .example = "random",
       .choices = {"center", "random"}},
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

std::string shape_text(const KeyValue& shape) {
  std::string text;
  for (const KeyValue& size : shape.items()) text += (text.empty() ? "" : ", ") + size.text();
  return "[" + text + "]";
}

// The checks of a field an image decoder decodes: uint8, a fixed [H, W, 3] (the size every image is
// made), and a resize that leaves every image large enough for that crop.
void check_image_field(const std::string& decoder, const KeyValue& field, KeyProblems& problems) {
  if (const KeyValue* dtype = field.find("dtype"); dtype != nullptr && dtype->text() != "uint8") {
    problems.add(*dtype, "the " + decoder + " decoder makes uint8 images, found " + dtype->text());
  }
  const KeyValue* shape = field.find("shape");
  if (shape == nullptr) {
    problems.add(
        field.key() + ".shape", field,
        "missing required key: the " + decoder + " decoder makes images of a fixed [H, W, 3], e.g. [224, 224, 3]");
    return;
  }
  const std::vector<KeyValue>& sizes = shape->items();
  if (sizes.size() != 3 || sizes[0].integer() == 0 || sizes[1].integer() == 0 || sizes[2].integer() != 3) {
    problems.add(*shape, "the " + decoder + " decoder makes [H, W, 3] images (H, W >= 1), found " + shape_text(*shape));
    return;
  }
  // After the resize every image's shorter side is resize_shorter, so only a crop no larger than that
  // fits every image (a portrait and a landscape one alike); a larger one fails on some sample.
  const int64_t height = sizes[0].integer();
  const int64_t width = sizes[1].integer();
  const int64_t needed = std::max(height, width);
  if (const KeyValue* resize = field.find("resize_shorter"); resize != nullptr && resize->integer() < needed) {
    problems.add(*resize, "resize_shorter " + std::to_string(resize->integer()) + " is smaller than the crop [" +
                              std::to_string(height) + ", " + std::to_string(width) + "] (" + shape->key() +
                              "): each image's shorter side becomes " + std::to_string(resize->integer()) +
                              " pixels, so the crop does not fit; use resize_shorter >= " + std::to_string(needed));
  }
}

// The options a field's keys give an image decoder. Neither resize_shorter nor crop: the image is
// taken as it is, so every image must already be the field's [H, W].
ImageDecodeOptions image_options(const DecoderArgs& args) {
  ImageDecodeOptions options;
  options.seed = args.seed;
  const KeyValue* resize = args.keys.find("resize_shorter");
  const KeyValue* crop = args.keys.find("crop");
  if (resize != nullptr || crop != nullptr) {
    const std::vector<int64_t>& shape = args.field.shape;
    if (shape.size() != 3 || shape[0] <= 0 || shape[1] <= 0 || shape[2] != 3) {
      throw Error("field '" + args.field.name +
                  "': resize_shorter/crop need the field's shape to be [H, W, 3] (the crop's size)");
    }
    options.resize_shorter = resize != nullptr ? resize->integer() : 0;
    options.crop_height = shape[0];
    options.crop_width = shape[1];
    options.crop = crop != nullptr && crop->text() == "random" ? ImageDecodeOptions::Crop::kRandom
                                                               : ImageDecodeOptions::Crop::kCenter;
  }
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
  keys.push_back(device_key());
  return image_kind<JpegDecoder>("jpeg",
                                 "A JPEG file's bytes to a uint8 RGB image of the field's [H, W, 3] (libjpeg-turbo, "
                                 "or nvJPEG's hardware decoder with `device`).",
                                 std::move(keys));
}

DecoderKind png_decoder_kind() {
  return image_kind<PngDecoder>("png", "A PNG file's bytes to a uint8 RGB image of the field's [H, W, 3] (libpng).",
                                size_keys());
}

DecoderKind image_decoder_kind() {
  return image_kind<ImageDecoder>(
      "image", "A JPEG or a PNG file, told apart by its bytes, to a uint8 RGB image of the field's [H, W, 3].",
      size_keys());
}

}  // namespace detail
}  // namespace ferry
