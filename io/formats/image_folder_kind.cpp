// The `image_folder` source kind: torchvision's ImageFolder layout, root/<class>/<file>.
#include <algorithm>
#include <sstream>

#include <sys/stat.h>

#include "ferry/io/formats/builtin_source_kinds.h"
#include "ferry/io/formats/field_keys.h"
#include "ferry/io/formats/image_folder_source.h"
#include "ferry/io/util/dataset_paths.h"

namespace ferry {
namespace {

using Type = KeySpec::Type;

// The extensions as the source compares them: without a leading dot.
std::vector<std::string> extensions_of(const KeyValue& source) {
  const KeyValue* list = source.find("extensions");
  if (list == nullptr) return ImageFolderOptions{}.extensions;
  std::vector<std::string> extensions;
  for (const KeyValue& item : list->items()) {
    std::string text = item.text();
    if (!text.empty() && text.front() == '.') text.erase(0, 1);
    extensions.push_back(std::move(text));
  }
  return extensions;
}

void check_image_folder(const KeyValue& source, KeyProblems& problems) {
  // Found now, with the key's place, rather than when the folder is scanned.
  const KeyValue& root = source.at("root");
  struct stat info {};
  if (const auto why = detail::unsupported_path(root.text(), false)) {
    problems.add(root, *why);
  } else if (::stat(root.text().c_str(), &info) != 0) {
    problems.add(root, detail::missing_text(root.text(), "folder") + detail::make_dataset_hint("images", root.text()));
  } else if (!S_ISDIR(info.st_mode)) {
    problems.add(root, "not a folder: " + detail::absolute_path(root.text()));
  }
  bool extensions_valid = true;
  if (const KeyValue* list = source.find("extensions")) {
    for (const KeyValue& item : list->items()) {
      std::string text = item.text();
      if (!text.empty() && text.front() == '.') text.erase(0, 1);
      if (text.empty() || text.find('/') != std::string::npos) {
        problems.add(item, "expected an extension such as jpg, found '" + item.text() + "'");
        extensions_valid = false;
      }
    }
  }
  const KeyValue& image = source.at("image");
  if (extensions_valid) {
    detail::check_image_extensions(image, image.text_or("decoder", "jpeg"), extensions_of(source), problems);
  }
}

}  // namespace

ImageFolderOptions image_folder_options(const KeyValue& source) {
  ImageFolderOptions options;
  options.root = source.at("root").text();
  options.extensions = extensions_of(source);
  const KeyValue& image = source.at("image");
  options.image.decoder = image.text_or("decoder", "jpeg");  // the config's default: images decoded
  if (const KeyValue* shape = image.find("shape")) {
    options.image.shape = detail::shape_of(*shape);
  }
  if (const KeyValue* pixels = image.find("max_pixels")) options.image.max_length = pixels->integer();
  return options;
}

namespace detail {

SourceKind image_folder_source_kind() {
  SourceKind kind;
  kind.name = "image_folder";
  kind.description =
      "A folder of image files, one sub-folder per class (torchvision's ImageFolder layout). Samples have two "
      "fields: `image` and `label` (the class index, int64); keys are paths relative to root.";
  kind.keys = {
      {.name = "root",
       .type = Type::kPath,
       .description = "The folder of images, one sub-folder per class: `root/<class>/<file>`. Class folders sorted "
                      "by name are labels 0, 1, ...; below each, files are found in sub-folders too and sorted by "
                      "path; hidden files and folders are skipped.",
       .default_value = "required",
       .required = true,
       .example = "data/images",
       .min = 1,
       .expected = "a folder path",
       .missing = "the folder holding one sub-folder per class"},
      {.name = "extensions",
       .type = Type::kList,
       .description = "The files that count, by extension, compared case-insensitively. PNG files need decoder `png` "
                      "or `image`.",
       .default_value = "[jpg, jpeg]",
       .example = "[jpg, jpeg, JPG]",
       .min = 1,
       .item = {{.type = Type::kString, .expected = "an extension such as jpg"}},
       .expected = "a non-empty list of file extensions, e.g. [jpg, jpeg]",
       .type_text = "list of strings"},
      {.name = "image",
       .type = Type::kMapping,
       .description = "How each file's bytes become the `image` field.",
       .default_value = "required",
       .required = true,
       .example = "{shape: [224, 224, 3], resize_shorter: 256, crop: center}",
       .keys =
           {
               detail::shape_key("The decoded image's shape: [H, W, 3] for the image decoders (uint8 RGB), or "
                                 "[null, null, 3] to keep each image's own size.",
                                 "required with jpeg, png, webp, image; raw: bytes of any length", "[224, 224, 3]"),
               detail::max_pixels_key(),
               {.name = "decoder",
                .type = Type::kDecoder,
                .description =
                    "How a file's bytes become the image: jpeg, png, webp, image (JPEG, PNG or WebP, told apart by "
                    "their bytes: for folders that mix them), raw (the file's bytes as stored), or one your "
                    "program or a plugin registers. The mapping also takes the decoder's own keys.",
                .default_value = "jpeg",
                .example = "raw"},
           },
       .missing = "how the images decode, e.g. image: {shape: [224, 224, 3]}"},
  };
  kind.make = [](const KeyValue& source) { return std::make_shared<ImageFolderSource>(image_folder_options(source)); };
  kind.check = check_image_folder;
  kind.error_key = "source.root";  // a folder's problems (no classes, an empty class) are the root's
  kind.fields = [](const KeyValue& source) {
    const ImageFolderOptions options = image_folder_options(source);
    return std::vector<FieldSpec>{FieldSpec{.name = options.image.name, .shape = options.image.shape},
                                  FieldSpec{.name = "label"}};
  };
  kind.decoded_fields = [](const KeyValue& source) {
    const KeyValue& image = source.at("image");
    return std::vector<DecodedField>{{ImageFolderOptions{}.image.name, &image, image.text_or("decoder", "jpeg")}};
  };
  kind.order = [](const KeyValue& source, const Source& made) {
    // The folder as scanned: another root, other extensions or other classes number samples otherwise.
    std::map<std::string, std::string> order;
    const auto* folder = dynamic_cast<const ImageFolderSource*>(&made);
    const ImageFolderOptions options = folder != nullptr ? folder->options() : image_folder_options(source);
    order["source.root"] = real_path(options.root);
    std::vector<std::string> extensions = options.extensions;
    std::sort(extensions.begin(), extensions.end());
    std::string extension_list;
    for (const std::string& extension : extensions) extension_list += extension + ";";
    order["source.extensions"] = extension_list;
    if (folder != nullptr) order["source.classes"] = std::to_string(folder->class_names().size());
    std::ostringstream image;
    image << options.image.decoder << "[";
    for (const int64_t size : options.image.shape) image << size << ",";
    image << "]" << detail::image_order_text(source.at("image"));
    order["source.image"] = image.str();
    return order;
  };
  return kind;
}

}  // namespace detail
}  // namespace ferry
