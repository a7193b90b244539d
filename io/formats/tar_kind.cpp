// The `tar` source kind: WebDataset-style tar shards, a sample being the members sharing a basename.
#include <sstream>

#include <sys/stat.h>

#include "ferry/io/formats/builtin_source_kinds.h"
#include "ferry/io/formats/field_keys.h"
#include "ferry/io/formats/tar_shard_source.h"
#include "ferry/io/util/dataset_paths.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/io/util/regular_file.h"
#include "ferry/io/util/units.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

using Type = KeySpec::Type;

std::vector<KeySpec> member_keys() {
  return {
      {.name = "name",
       .type = Type::kString,
       .description = "The field's name in a batch.",
       .default_value = "required",
       .required = true,
       .example = "image",
       .min = 1,
       .expected = "a non-empty name"},
      {.name = "extension",
       .type = Type::kList,
       .description = "The member's extension, without the dot: `jpg`, `cls`, `seg.png`; or a list of them, "
                      "`[jpg, jpeg, png, webp]`, of which each sample's first one is read.",
       .default_value = "required",
       .required = true,
       .example = "[jpg, png]",
       .min = 1,
       .item = {{.type = Type::kString, .min = 1, .expected = "a non-empty name"}},
       .one_or_list = true,
       .expected = "an extension or a list of them",
       .type_text = "extension or list of extensions"},
      {.name = "dtype",
       .type = Type::kChoice,
       .description = "Element type after decoding.",
       .default_value = "uint8",
       .example = "uint8",
       .choices = dtype_names()},
      detail::shape_key("Shape after decoding, [H, W, 3] for the image decoders. null for a size that varies per "
                        "sample: the first ([null, 4]: boxes; any number of rows), or H and W of an image ([null, "
                        "null, 3]: each image its own size). Without it the field is bytes of any length.",
                        "bytes of any length", "[64, 64, 3]"),
      {.name = "max_length",
       .type = Type::kInteger,
       .description = "Longest first dimension of a variable-length field (for [null, null, 3] images, see "
                      "max_pixels): lets `pool.slab_size` be auto.",
       .default_value = "none",
       .example = "4096",
       .min = 1,
       .max = 1073741824},
      detail::max_pixels_key(),
      {.name = "decoder",
       .type = Type::kDecoder,
       .description =
           "How the member's bytes become the field: raw, jpeg, png, webp, image (JPEG, PNG or WebP, told apart by "
           "their bytes), npy, label, json, or one your program or a plugin registers. The mapping also "
           "takes the decoder's own keys (docs/config.md, Decoders).",
       .default_value = "raw",
       .example = "raw"},
      {.name = "device",
       .type = Type::kChoice,
       .description = "host: the field stays on the host, a CPU tensor of its own (ids, keys as bytes; as "
                      "`collate.host`). cpu, gpu, auto: where the jpeg decoder decodes (its `device` key).",
       .default_value = "the batch's device",
       .example = "host",
       .choices = {"host", "cpu", "gpu", "auto"}},
      {.name = "optional",
       .type = Type::kBoolean,
       .description = "A sample without this member is no error: the field is zeros (a variable-length one empty), "
                      "and the field `<name>_present` (bool) says which samples had it.",
       .default_value = "false",
       .example = "true"},
  };
}

// A member's `extension`: one or a list.
std::vector<std::string> extensions_of(const KeyValue& member) {
  std::vector<std::string> extensions;
  for (const KeyValue& extension : member.at("extension").items()) extensions.push_back(extension.text());
  return extensions;
}

void check_shards(const KeyValue& shards, KeyProblems& problems) {
  for (const KeyValue& item : shards.items()) {
    const std::string& pattern = item.text();
    if (const auto why = detail::unsupported_path(pattern)) {
      problems.add(item, *why);
      continue;
    }
    try {
      std::vector<std::string> missing;
      const std::vector<std::string> expanded = TarShardSource::expand_braces(pattern);
      if (detail::is_fetched_path(pattern)) continue;  // asked for when the source is made
      for (const std::string& shard : expanded) {
        struct stat info {};
        if (::stat(shard.c_str(), &info) != 0) {
          missing.push_back(shard);
        } else if (const auto kind = detail::special_file_kind(shard)) {  // a FIFO would block the open
          problems.add(item, "'" + shard + "' is " + *kind + ", not a regular file: a tar shard is read at any offset");
        }
      }
      const std::string hint = missing.size() == expanded.size() ? detail::tar_dataset_hint(expanded) : "";
      if (expanded.size() > 1 && missing.size() == expanded.size()) {  // one problem, not thousands
        problems.add(item, detail::missing_text(pattern) + " (none of its " + std::to_string(expanded.size()) +
                               " shards exists)" + hint);
      } else {
        for (const std::string& shard : missing) problems.add(item, detail::missing_text(shard) + hint);
      }
    } catch (const Error& e) {
      problems.add(item, e.cause());
    }
  }
}

void check_tar(const KeyValue& source, KeyProblems& problems) {
  check_shards(source.at("shards"), problems);
  if (const KeyValue* members = source.find("members")) {
    for (const KeyValue& member : members->items()) {
      detail::check_image_extensions(member, member.text_or("decoder", "raw"), extensions_of(member), problems);
      if (const KeyValue* pixels = member.find("max_pixels")) {
        const KeyValue* shape = member.find("shape");
        const bool own_size = shape != nullptr && shape->items().size() == 3 && shape->items()[0].is_null() &&
                              shape->items()[1].is_null();
        if (!own_size) problems.add(*pixels, "max_pixels bounds images of their own size: shape [null, null, 3]");
        if (member.find("max_length") != nullptr) {
          problems.add(*pixels, "give max_pixels or max_length, not both: both bound the same sizes");
        }
      }
    }
  }
}

TarField member_of(const KeyValue& member) {
  TarField field;
  field.name = member.at("name").text();
  const std::vector<std::string> extensions = extensions_of(member);
  field.extension = extensions.front();
  field.alternatives.assign(extensions.begin() + 1, extensions.end());
  if (const KeyValue* dtype = member.find("dtype")) field.dtype = parse_dtype(dtype->text());
  if (const KeyValue* shape = member.find("shape")) {
    field.shape = detail::shape_of(*shape);
  }
  if (const KeyValue* length = member.find("max_length")) field.max_length = length->integer();
  if (const KeyValue* pixels = member.find("max_pixels")) field.max_length = pixels->integer();
  field.decoder = member.text_or("decoder", field.decoder);
  field.optional = member.boolean_or("optional", field.optional);
  return field;
}

}  // namespace

TarShardOptions tar_options(const KeyValue& source) {
  TarShardOptions options;
  options.shards = detail::expanded_paths(source.at("shards"));
  if (const KeyValue* members = source.find("members")) {
    for (const KeyValue& member : members->items()) options.fields.push_back(member_of(member));
  }
  return options;
}

namespace detail {

void check_image_extensions(const KeyValue& field, const std::string& decoder,
                            const std::vector<std::string>& extensions, KeyProblems& problems) {
  for (const std::string& extension : extensions) {
    // The format is the last part: "seg.png" (a tar member) and ".png" (an image folder's) are PNGs.
    const size_t dot = extension.rfind('.');
    const std::string shown = dot == std::string::npos ? extension : extension.substr(dot + 1);
    // The format an extension names, where it names an image format.
    const std::string format = equal_ignoring_case(shown, "png")                                         ? "png"
                               : equal_ignoring_case(shown, "jpg") || equal_ignoring_case(shown, "jpeg") ? "jpeg"
                               : equal_ignoring_case(shown, "webp")                                      ? "webp"
                                                                                                         : "";
    const bool image_decoder = decoder == "jpeg" || decoder == "png" || decoder == "webp";
    if (image_decoder && !format.empty() && format != decoder) {
      const KeyValue* named = field.find("decoder");
      problems.add(field.key() + ".decoder", named != nullptr ? *named : field,
                   "the " + decoder + " decoder cannot read ." + shown + " files; use decoder: " + format +
                       ", or decoder: image, which reads JPEG, PNG and WebP files alike");
      return;
    }
  }
}

SourceKind tar_source_kind() {
  SourceKind kind;
  kind.name = "tar";
  kind.description = "WebDataset-style tar shards: a sample is the consecutive members sharing a basename.";
  kind.keys = {
      {.name = "shards",
       .type = Type::kList,
       .description = "The tar shards, read in this order; `{000..009}` in a path stands for each number of the "
                      "range. Local paths, http://, https:// or s3:// URLs, or `pipe:COMMAND`; gzip, zstd and xz "
                      "shards (.tar.gz, .tar.zst, .tar.xz) too (docs/remote-data.md).",
       .default_value = "required",
       .required = true,
       .example = "[data/shard-000.tar]",
       .item = {{.type = Type::kPath, .expected = "a path"}},
       .one_or_list = true,
       .expected = "a path or a list of paths",
       .type_text = "path or list of paths",
       .missing = "the tar shards: a path or a list of paths"},
      {.name = "members",
       .type = Type::kList,
       .description = "Which member of each sample feeds which field, and how it decodes. Without it: labels "
                      "(`.cls`, `.id`, ...) as int64 through `label`, everything else as raw bytes.",
       .default_value = "one field per extension of the first sample",
       .example = "[{name: label, extension: cls, dtype: int64, shape: [], decoder: label}]",
       .item = {{.type = Type::kMapping, .keys = member_keys()}},
       .expected = "a list of members ({name, extension, dtype, shape, max_length, decoder, optional})",
       .type_text = "list of members"},
  };
  kind.make_in = [](const KeyValue& source, const MakeContext& context) {
    TarShardOptions options = tar_options(source);
    options.remote = context.remote;
    return std::make_shared<TarShardSource>(std::move(options));
  };
  kind.check = check_tar;
  kind.shards = true;
  kind.fields = [](const KeyValue& source) {
    // Without members the fields are known only once a shard is read.
    std::vector<FieldSpec> fields;
    for (const TarField& member : tar_options(source).fields) {
      fields.push_back(FieldSpec{.name = member.name, .shape = member.shape});
      if (member.optional) fields.push_back(FieldSpec{.name = member.name + "_present", .dtype = at::kBool});
    }
    return fields;
  };
  kind.decoded_fields = [](const KeyValue& source) {
    std::vector<DecodedField> fields;
    if (const KeyValue* members = source.find("members")) {
      for (const KeyValue& member : members->items()) {
        fields.push_back({member.at("name").text(), &member, member.text_or("decoder", "raw")});
      }
    }
    return fields;
  };
  kind.order = [](const KeyValue& source, const Source&) {
    std::map<std::string, std::string> order;
    std::string shards;
    for (const std::string& shard : detail::expanded_paths(source.at("shards"))) shards += real_path(shard) + ";";
    order["source.shards"] = shards;
    std::ostringstream members;
    if (const KeyValue* list = source.find("members")) {
      for (const KeyValue& member : list->items()) {
        const TarField field = member_of(member);
        members << field.name << ":" << field.extension;
        for (const std::string& alternative : field.alternatives) members << "|" << alternative;
        members << ":" << dtype_name(field.dtype) << ":" << field.decoder << (field.optional ? ":optional" : "")
                << detail::image_order_text(member);
        if (const KeyValue* select = member.find("select")) members << ":select=" << select->text();
        members << ";";
      }
    }
    order["source.members"] = members.str();
    return order;
  };
  kind.size_advice = [](const KeyValue& source, const std::string& field) {
    std::string extension = field;  // fields found in the shards are named after their extension
    if (const KeyValue* members = source.find("members")) {
      for (const KeyValue& member : members->items()) {
        if (member.at("name").text() == field) extension = extensions_of(member).front();
      }
    }
    const std::string image_decoder = extension == "png"                          ? "png"
                                      : extension == "webp"                       ? "webp"
                                      : extension == "jpg" || extension == "jpeg" ? "jpeg"
                                                                                  : "";
    const bool image = !image_decoder.empty();
    const std::string member = "{name: " + field + ", extension: " + extension;
    const std::string unknown = "field '" + field +
                                "' is variable-length with no max_length, so the largest batch (and the pinned "
                                "slab it needs) is unknown: ";
    return std::optional<KeyProblem>(
        KeyProblem{"source.members", "",
                   unknown + "in source.members, " +
                       (image ? "give it a decoder and a fixed shape, e.g. " + member + ", decoder: " + image_decoder +
                                    ", shape: [224, 224, 3], resize_shorter: 256}, or for images of their own size a "
                                    "max_pixels (shape: [null, null, 3])"
                              : "give it a max_length (its longest first dimension), e.g. " + member +
                                    ", max_length: 65536}, or a decoder with a fixed shape") +
                       "; or set pool.slab_size"});
  };
  return kind;
}

}  // namespace detail
}  // namespace ferry
