// The built-in sample transforms: drop fields a training step does not use, rename a field.
#include <algorithm>

#include "ferry/io/transforms/builtin_transforms.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

using Type = KeySpec::Type;

// `fields` of `input`, each of which must be there.
void require_fields(const std::vector<FieldSpec>& input, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (std::none_of(input.begin(), input.end(), [&](const FieldSpec& spec) { return spec.name == name; })) {
      std::string known;
      for (const FieldSpec& spec : input) known += (known.empty() ? "" : ", ") + spec.name;
      throw Error("the sample has no field '" + name + "' (its fields: " + known + ")");
    }
  }
}

class DropTransform : public Transform {
 public:
  explicit DropTransform(std::vector<std::string> fields) : fields_(std::move(fields)) {}
  std::string_view name() const override { return "drop"; }
  std::vector<FieldSpec> output_fields(const std::vector<FieldSpec>& input) const override {
    require_fields(input, fields_);
    std::vector<FieldSpec> output;
    for (const FieldSpec& spec : input) {
      if (std::find(fields_.begin(), fields_.end(), spec.name) == fields_.end()) output.push_back(spec);
    }
    return output;
  }
  void apply(SampleFields& sample, const SampleContext&) const override {
    for (const std::string& field : fields_) sample.erase(field);
  }

 private:
  std::vector<std::string> fields_;
};

class RenameTransform : public Transform {
 public:
  RenameTransform(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::string_view name() const override { return "rename"; }
  std::vector<FieldSpec> output_fields(const std::vector<FieldSpec>& input) const override {
    require_fields(input, {from_});
    std::vector<FieldSpec> output = input;
    for (FieldSpec& spec : output) {
      if (spec.name == to_) throw Error("the sample has a field '" + to_ + "' already");
    }
    for (FieldSpec& spec : output) {
      if (spec.name == from_) spec.name = to_;
    }
    return output;
  }
  void apply(SampleFields& sample, const SampleContext&) const override {
    // Rebuilt in place: the renamed field keeps its position.
    std::vector<std::string> names = sample.names();
    std::vector<at::Tensor> tensors = std::move(sample).take();
    for (std::string& name : names) {
      if (name == from_) name = to_;
    }
    sample = SampleFields(std::move(names), std::move(tensors));
  }

 private:
  std::string from_;
  std::string to_;
};

}  // namespace

namespace detail {

TransformKind drop_transform_kind() {
  TransformKind kind;
  kind.name = "drop";
  kind.description =
      "Removes fields from every sample: fields a training step does not use need not be collated "
      "or copied.";
  kind.keys = {{.name = "fields",
                .type = Type::kList,
                .description = "The fields to remove.",
                .default_value = "required",
                .required = true,
                .example = "[label]",
                .min = 1,
                .item = {{.type = Type::kString, .min = 1, .expected = "a field name"}},
                .one_or_list = true,
                .expected = "a field name or a list of them",
                .type_text = "field name or list of field names"}};
  kind.make = [](const KeyValue& keys) -> std::shared_ptr<const Transform> {
    std::vector<std::string> fields;
    for (const KeyValue& field : keys.at("fields").items()) fields.push_back(field.text());
    return std::make_shared<DropTransform>(std::move(fields));
  };
  return kind;
}

TransformKind rename_transform_kind() {
  TransformKind kind;
  kind.name = "rename";
  kind.description = "Gives a field another name (a tar member named after its extension, `jpg`, as `image`).";
  kind.keys = {
      {.name = "from",
       .type = Type::kString,
       .description = "The field's name.",
       .default_value = "required",
       .required = true,
       .example = "jpg",
       .min = 1,
       .expected = "a field name"},
      {.name = "to",
       .type = Type::kString,
       .description = "Its new name.",
       .default_value = "required",
       .required = true,
       .example = "image",
       .min = 1,
       .expected = "a field name"},
  };
  kind.make = [](const KeyValue& keys) -> std::shared_ptr<const Transform> {
    return std::make_shared<RenameTransform>(keys.at("from").text(), keys.at("to").text());
  };
  return kind;
}

}  // namespace detail
}  // namespace ferry
