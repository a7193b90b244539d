// The `jsonl` source kind: JSON-lines files, a field per member of each line's object (text for the
// sentencepiece decoder, numbers and arrays for json).
#include <map>
#include <set>
#include <sstream>

#include <sys/stat.h>

#include "ferry/io/formats/builtin_source_kinds.h"
#include "ferry/io/formats/field_keys.h"
#include "ferry/io/formats/jsonl_source.h"
#include "ferry/io/formats/tar_shard_source.h"
#include "ferry/io/util/dataset_paths.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/io/util/regular_file.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

using Type = KeySpec::Type;

std::vector<KeySpec> field_keys() {
  return {
      {.name = "name",
       .type = Type::kString,
       .description = "The field's name in a batch.",
       .default_value = "required",
       .required = true,
       .example = "tokens",
       .min = 1,
       .expected = "a non-empty name"},
      {.name = "key",
       .type = Type::kString,
       .description = "The member of each line's object that feeds the field: a string gives its UTF-8 bytes, any "
                      "other value its JSON text.",
       .default_value = "the field's name",
       .example = "text",
       .min = 1,
       .expected = "a member name"},
      {.name = "dtype",
       .type = Type::kChoice,
       .description = "Element type after decoding: int64 or int32 for sentencepiece's ids.",
       .default_value = "uint8",
       .example = "int64",
       .choices = dtype_names()},
      detail::shape_key("Shape after decoding: [1024] for ids cut and padded to 1024, [null] for any length.", "[null]",
                        "[1024]"),
      {.name = "max_length",
       .type = Type::kInteger,
       .description = "Longest length of a [null] field: the sentencepiece decoder cuts to it; lets `pool.slab_size` "
                      "be auto.",
       .default_value = "none",
       .example = "2048",
       .min = 1,
       .max = 1073741824},
      {.name = "decoder",
       .type = Type::kDecoder,
       .description = "How the member becomes the field: raw (the text's bytes), sentencepiece, json, or one your "
                      "program or a plugin registers. The mapping also takes the decoder's own keys (docs/config.md, "
                      "Decoders).",
       .default_value = "raw",
       .example = "json"},
  };
}

JsonlField field_of(const KeyValue& mapping) {
  JsonlField field;
  field.name = mapping.at("name").text();
  field.key = mapping.text_or("key", field.name);
  if (const KeyValue* dtype = mapping.find("dtype")) field.dtype = parse_dtype(dtype->text());
  if (const KeyValue* shape = mapping.find("shape")) field.shape = detail::shape_of(*shape);
  if (const KeyValue* length = mapping.find("max_length")) field.max_length = length->integer();
  field.decoder = mapping.text_or("decoder", field.decoder);
  return field;
}

JsonlOptions jsonl_options(const KeyValue& source) {
  JsonlOptions options;
  options.files = detail::expanded_paths(source.at("files"));
  for (const KeyValue& field : source.at("fields").items()) options.fields.push_back(field_of(field));
  return options;
}

void check_jsonl(const KeyValue& source, KeyProblems& problems) {
  for (const KeyValue& item : source.at("files").items()) {
    if (const auto why = detail::unsupported_path(item.text())) {
      problems.add(item, *why);
      continue;
    }
    if (detail::is_fetched_path(item.text())) continue;  // asked for when the source is made
    try {
      for (const std::string& file : TarShardSource::expand_braces(item.text())) {
        struct stat info {};
        if (::stat(file.c_str(), &info) != 0) {
          problems.add(item, detail::missing_text(file, "JSON-lines file"));
        } else if (const auto kind = detail::special_file_kind(file)) {
          problems.add(item, "'" + file + "' is " + *kind + ", not a regular file: a JSON-lines file is mapped whole");
        }
      }
    } catch (const Error& e) {
      problems.add(item, e.cause());
    }
  }
  std::set<std::string> names;
  for (const KeyValue& field : source.at("fields").items()) {
    const KeyValue& name = field.at("name");
    if (!names.insert(name.text()).second) problems.add(name, "a second field named '" + name.text() + "'");
  }
}

}  // namespace

namespace detail {

SourceKind jsonl_source_kind() {
  SourceKind kind;
  kind.name = "jsonl";
  kind.description =
      "JSON-lines files: each line an object, one sample; a field is one of its members (text through the "
      "sentencepiece or raw decoder, numbers and arrays through json).";
  kind.keys = {
      {.name = "files",
       .type = Type::kList,
       .description = "The JSON-lines files, read in this order; `{000..009}` in a path stands for each number of "
                      "the range. Paths, http://, https:// or s3:// URLs, or pipe:COMMAND; gzip, zstd or xz files "
                      "too (fetched and decoded into memory).",
       .default_value = "required",
       .required = true,
       .example = "[data/text.jsonl]",
       .item = {{.type = Type::kPath, .expected = "a path"}},
       .one_or_list = true,
       .expected = "a path or a list of paths",
       .type_text = "path or list of paths",
       .missing = "the JSON-lines files: a path or a list of paths"},
      {.name = "fields",
       .type = Type::kList,
       .description = "The fields of a sample: which member feeds each, and how it decodes.",
       .default_value = "required",
       .required = true,
       .example =
           "[{name: tokens, key: text, dtype: int64, shape: [1024], decoder: sentencepiece, model: tokenizer.model}]",
       .min = 1,
       .item = {{.type = Type::kMapping, .keys = field_keys()}},
       .expected = "a list of fields ({name, key, dtype, shape, max_length, decoder})",
       .type_text = "list of fields",
       .missing = "the fields: a list of {name, key, dtype, shape, max_length, decoder}"},
  };
  kind.make_in = [](const KeyValue& source, const MakeContext& context) {
    JsonlOptions options = jsonl_options(source);
    options.remote = context.remote;
    return std::make_shared<JsonlSource>(std::move(options));
  };
  kind.check = check_jsonl;
  kind.error_key = "source.files";
  kind.fields = [](const KeyValue& source) {
    std::vector<FieldSpec> fields;
    for (const JsonlField& field : jsonl_options(source).fields) {
      fields.push_back(FieldSpec{.name = field.name, .shape = field.shape});
    }
    return fields;
  };
  kind.decoded_fields = [](const KeyValue& source) {
    std::vector<DecodedField> fields;
    for (const KeyValue& field : source.at("fields").items()) {
      fields.push_back({field.at("name").text(), &field, field.text_or("decoder", "raw")});
    }
    return fields;
  };
  kind.order = [](const KeyValue& source, const Source&) {
    std::map<std::string, std::string> order;
    std::string files;
    for (const std::string& file : detail::expanded_paths(source.at("files"))) files += real_path(file) + ";";
    order["source.files"] = files;
    std::ostringstream fields;
    for (const KeyValue& mapping : source.at("fields").items()) {
      const JsonlField field = field_of(mapping);
      fields << field.name << ":" << field.key << ":" << dtype_name(field.dtype) << ":" << field.decoder;
      for (const char* key : {"model", "add_bos", "add_eos", "pad_id", "max_length", "select"}) {
        if (const KeyValue* value = mapping.find(key)) fields << ":" << key << "=" << value->text();
      }
      fields << ";";
    }
    order["source.fields"] = fields.str();
    return order;
  };
  kind.size_advice = [](const KeyValue&, const std::string& field) {
    return std::optional<KeyProblem>(KeyProblem{
        "source.fields", "",
        "field '" + field +
            "' is variable-length with no max_length, so the largest batch (and the pinned slab it needs) is "
            "unknown: in source.fields, give it a max_length, e.g. {name: " +
            field + ", max_length: 2048}, or a fixed shape ([1024]); or set pool.slab_size"});
  };
  return kind;
}

}  // namespace detail
}  // namespace ferry
