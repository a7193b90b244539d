#include "ferry/io/formats/field_keys.h"

#include <utility>

#include "ferry/io/formats/source.h"
#include "ferry/io/formats/tar_shard_source.h"

namespace ferry::detail {

KeySpec shape_key(std::string description, std::string default_value, std::string example) {
  return {.name = "shape",
          .type = KeySpec::Type::kList,
          .description = std::move(description),
          .default_value = std::move(default_value),
          .example = std::move(example),
          .item = {{.type = KeySpec::Type::kInteger, .min = 0, .max = 1073741824, .nullable = true}},
          .expected =
              "a list of sizes, each an integer >= 0 or null (varies per sample), e.g. [224, 224, 3] or "
              "[null, 4]",
          .type_text = "list of integers >= 0 or null"};
}

KeySpec max_pixels_key() {
  return {.name = "max_pixels",
          .type = KeySpec::Type::kInteger,
          .description =
              "Images of their own size (shape [null, null, 3]): the most pixels (H x W) one may have after "
              "its resize, so that `pool.slab_size` can be auto; a larger one is an error naming the sample.",
          .default_value = "none",
          .example = "1048576",
          .min = 1,
          .max = 1073741824};
}

std::vector<int64_t> shape_of(const KeyValue& shape) {
  std::vector<int64_t> sizes;
  for (const KeyValue& size : shape.items()) sizes.push_back(size.is_null() ? kVariableLength : size.integer());
  return sizes;
}

std::string image_order_text(const KeyValue& field) {
  const KeyValue* resize = field.find("resize_shorter");
  const KeyValue* crop = field.find("crop");
  std::string text;
  if (resize != nullptr || crop != nullptr) {  // as states saved before the other keys existed hold it
    const std::string kind = crop != nullptr ? crop->text() : "center";
    text = ":resize_shorter=" + (resize != nullptr ? std::to_string(resize->integer()) : std::string("0")) +
           ":crop=" + kind;
  }
  for (const char* key : {"scale", "ratio", "flip", "interpolation", "antialias", "dct_scaling"}) {
    if (const KeyValue* value = field.find(key)) text += std::string(":") + key + "=" + value->yaml();
  }
  return text;
}

std::vector<std::string> expanded_paths(const KeyValue& paths) {
  std::vector<std::string> expanded;
  for (const KeyValue& pattern : paths.items()) {
    for (std::string& path : TarShardSource::expand_braces(pattern.text())) expanded.push_back(std::move(path));
  }
  return expanded;
}

}  // namespace ferry::detail
