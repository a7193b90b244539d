// The `synthetic` source kind: deterministic samples from (seed, index), nothing to download.
#include <cmath>
#include <map>
#include <sstream>

#include "ferry/io/formats/builtin_source_kinds.h"
#include "ferry/io/formats/synthetic_source.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

using Type = KeySpec::Type;

constexpr double kMaxCount = 4611686018427387904.0;  // 2^62: counts the config may hold
constexpr double kMaxDim = 1073741824.0;             // 2^30: one dimension

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::vector<KeySpec> synthetic_keys() {
  const KeySpec dimension{.name = "", .type = Type::kInteger, .min = 0, .max = kMaxDim};
  const KeySpec number{.name = "", .type = Type::kNumber};
  return {
      {.name = "samples",
       .type = Type::kInteger,
       .description = "Samples in the dataset.",
       .default_value = "1024",
       .example = "10000",
       .min = 1,
       .max = kMaxCount,
       .expected = "an integer >= 1",
       .type_text = "integer >= 1"},
      {.name = "seed",
       .type = Type::kInteger,
       .description = "Seed of the synthetic data: the same seed gives the same bytes on every machine.",
       .default_value = "0",
       .example = "7",
       .min = 0,
       .expected = "an integer >= 0",
       .type_text = "integer"},
      {.name = "fields",
       .type = Type::kList,
       .description = "The fields of each sample, in order.",
       .default_value = "required",
       .required = true,
       .example = "[{name: image, dtype: uint8, shape: [3, 64, 64]}]",
       .min = 1,
       .item = {{.name = "",
                 .type = Type::kMapping,
                 .keys =
                     {
                         {.name = "name",
                          .type = Type::kString,
                          .description = "The field's name: the key of its tensor in a batch.",
                          .default_value = "required",
                          .required = true,
                          .example = "image",
                          .min = 1,
                          .expected = "a non-empty name",
                          .missing = "the field's name"},
                         {.name = "dtype",
                          .type = Type::kChoice,
                          .description = "Element type.",
                          .default_value = "required",
                          .required = true,
                          .example = "uint8",
                          .choices = dtype_names(),
                          .missing = "one of: " + dtype_names_text()},
                         {.name = "shape",
                          .type = Type::kList,
                          .description =
                              "Shape of one sample's tensor; for a variable-length field, the shape after its first "
                              "dimension.",
                          .default_value = "[]",
                          .example = "[3, 64, 64]",
                          .item = {dimension},
                          .expected = "a list of integers >= 0, e.g. [3, 64, 64]",
                          .type_text = "list of integers >= 0"},
                         {.name = "length",
                          .type = Type::kList,
                          .description = "Makes the field variable-length: its first dimension is drawn per sample "
                                         "from [min, max]; batches pad it and add `<field>_lengths`.",
                          .default_value = "fixed length",
                          .example = "[16, 256]",
                          .min = 2,
                          .max = 2,
                          .item = {number},
                          .expected = "[min, max] lengths, e.g. [16, 256]",
                          .type_text = "[min, max] integers"},
                         {.name = "range",
                          .type = Type::kList,
                          .description = "Values are drawn uniformly from [low, high).",
                          .default_value = "floats [-1, 1), integers: the dtype's range",
                          .example = "[0, 100]",
                          .min = 2,
                          .max = 2,
                          .item = {number},
                          .expected = "[low, high] values, e.g. [0, 1000]",
                          .type_text = "[low, high] numbers"},
                     }}},
       .expected = "a non-empty list of fields ({name, dtype, shape, length, range})",
       .type_text = "list of fields",
       .missing = "the fields of each sample, e.g. [{name: x, dtype: float32, shape: [4]}]"},
  };
}

// One field as the keys give it, without the checks across keys (check_synthetic makes those).
SyntheticField field_of(const KeyValue& field) {
  SyntheticField out;
  out.name = field.at("name").text();
  out.dtype = parse_dtype(field.at("dtype").text());
  if (const KeyValue* shape = field.find("shape")) {
    for (const KeyValue& size : shape->items()) out.shape.push_back(size.integer());
  }
  if (const KeyValue* length = field.find("length")) {
    out.variable = true;
    out.min_length = static_cast<int64_t>(length->items()[0].number());
    out.max_length = static_cast<int64_t>(length->items()[1].number());
  }
  if (const KeyValue* range = field.find("range")) {
    out.range = std::pair{range->items()[0].number(), range->items()[1].number()};
  }
  return out;
}

void check_synthetic(const KeyValue& source, KeyProblems& problems) {
  std::map<std::string, std::string> first_seen;  // name -> key path
  for (const KeyValue& field : source.at("fields").items()) {
    const KeyValue& name = field.at("name");
    if (const auto [it, inserted] = first_seen.emplace(name.text(), field.key()); !inserted) {
      problems.add(name, "field '" + name.text() + "' appears twice (also " + it->second + ")");
    }
    bool ok = true;
    if (const KeyValue* length = field.find("length")) {
      const double min = length->items()[0].number();
      const double max = length->items()[1].number();
      if (min < 0 || max < min || min != std::floor(min) || max != std::floor(max) || max > kMaxDim) {
        problems.add(*length, "expected whole numbers with 0 <= min <= max <= 1073741824, found [" + number_text(min) +
                                  ", " + number_text(max) + "]");
        ok = false;
      } else {
        int64_t row = 1;
        if (const KeyValue* shape = field.find("shape")) {
          for (const KeyValue& size : shape->items()) row *= size.integer();
        }
        if (row == 0) {
          problems.add(field.at("shape"),
                       "a variable-length field needs rows of at least one element (no 0 in its shape)");
          ok = false;
        }
      }
    }
    if (const KeyValue* range = field.find("range")) {
      const double low = range->items()[0].number();
      const double high = range->items()[1].number();
      if (!(low < high)) {
        problems.add(*range, "expected low < high, found [" + number_text(low) + ", " + number_text(high) + "]");
        ok = false;
      }
    }
    if (!ok) continue;
    // The source checks what is left (a range the dtype cannot hold): reported at the field.
    try {
      SyntheticSource check(SyntheticOptions{0, 1, {field_of(field)}});
    } catch (const Error& e) {
      const KeyValue* range = field.find("range");
      problems.add(range != nullptr ? *range : field, e.cause());
    }
  }
}

}  // namespace

SyntheticOptions synthetic_options(const KeyValue& source) {
  SyntheticOptions options;
  options.samples = source.unsigned_or("samples", options.samples);
  options.seed = source.unsigned_or("seed", options.seed);
  for (const KeyValue& field : source.at("fields").items()) options.fields.push_back(field_of(field));
  return options;
}

namespace detail {

SourceKind synthetic_source_kind() {
  SourceKind kind;
  kind.name = "synthetic";
  kind.description = "Deterministic samples made from (seed, index): nothing to download.";
  kind.keys = synthetic_keys();
  kind.make = [](const KeyValue& source) { return std::make_shared<SyntheticSource>(synthetic_options(source)); };
  kind.check = check_synthetic;
  kind.fields = [](const KeyValue& source) {
    std::vector<FieldSpec> fields;
    for (const KeyValue& field : source.at("fields").items()) {
      FieldSpec spec;
      spec.name = field.at("name").text();
      if (field.has("length")) spec.shape = {kVariableLength};
      fields.push_back(std::move(spec));
    }
    return fields;
  };
  kind.order = [](const KeyValue& source, const Source&) {
    const SyntheticOptions synthetic = synthetic_options(source);
    std::map<std::string, std::string> order;
    order["source.samples"] = std::to_string(synthetic.samples);
    order["source.seed"] = std::to_string(synthetic.seed);
    std::ostringstream fields;
    fields.precision(17);  // every double exactly: two ranges that differ must not read the same
    for (const SyntheticField& field : synthetic.fields) {
      fields << field.name << ":" << dtype_name(field.dtype) << "[";
      for (const int64_t size : field.shape) fields << size << ",";
      fields << "]";
      if (field.variable) fields << "len" << field.min_length << ".." << field.max_length;
      if (field.range) fields << "range" << field.range->first << ".." << field.range->second;
      fields << ";";
    }
    order["source.fields"] = fields.str();
    return order;
  };
  return kind;
}

}  // namespace detail
}  // namespace ferry
