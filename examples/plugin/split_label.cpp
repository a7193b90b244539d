// Transform `split_label`: one column of a record becomes an int64 `label`, the others float32
// `features`, in the record's place. With `jitter`, each feature gets uniform noise in [-jitter, jitter),
// drawn from the sample's (seed, epoch, index): another draw every epoch, the same on every run.
//
//   transforms: [{kind: split_label, label: 4, jitter: 0.01}]
#include <random>

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>

#include "extensions.h"

namespace records {
namespace {

class SplitLabel : public ferry::Transform {
 public:
  SplitLabel(std::string field, int64_t label, double jitter)
      : field_(std::move(field)), label_(label), jitter_(jitter) {}
  std::string_view name() const override { return "split_label"; }

  std::vector<ferry::FieldSpec> output_fields(const std::vector<ferry::FieldSpec>& input) const override {
    std::vector<ferry::FieldSpec> output;
    bool found = false;
    for (const ferry::FieldSpec& spec : input) {
      if (spec.name != field_) {
        output.push_back(spec);
        continue;
      }
      found = true;
      if (spec.dtype != at::kFloat || spec.shape.size() != 1 || spec.variable()) {
        throw ferry::Error("field '" + field_ + "' must be float32 [columns]");
      }
      if (label_ >= spec.shape[0]) {
        throw ferry::Error("label column " + std::to_string(label_) + " is past the record's " +
                           std::to_string(spec.shape[0]) + " columns");
      }
      output.push_back(ferry::FieldSpec{"features", at::kFloat, {spec.shape[0] - 1}});
      output.push_back(ferry::FieldSpec{"label", at::kLong, {}});
    }
    if (!found) throw ferry::Error("the samples have no field '" + field_ + "'");
    return output;
  }

  // Thread-safe: its generator is a local, seeded from the sample.
  void apply(ferry::SampleFields& sample, const ferry::SampleContext& context) const override {
    const at::Tensor& record = sample.at(field_);
    const float value = record[label_].item<float>();
    if (value != static_cast<float>(static_cast<int64_t>(value))) {
      throw ferry::Error("label column " + std::to_string(label_) + " holds " + std::to_string(value) +
                         ", not a whole number");
    }
    at::Tensor features = at::cat({record.slice(0, 0, label_), record.slice(0, label_ + 1)});
    if (jitter_ > 0) {
      std::mt19937_64 random(context.random_seed());
      std::uniform_real_distribution<float> noise(static_cast<float>(-jitter_), static_cast<float>(jitter_));
      float* values = features.data_ptr<float>();
      for (int64_t i = 0; i < features.numel(); ++i) values[i] += noise(random);
    }
    // Rebuilt in order: the record's place gets features and label.
    std::vector<std::string> names;
    std::vector<at::Tensor> tensors;
    for (size_t i = 0; i < sample.names().size(); ++i) {
      if (sample.names()[i] == field_) {
        names.insert(names.end(), {"features", "label"});
        tensors.push_back(features);
        tensors.push_back(at::scalar_tensor(static_cast<int64_t>(value), at::kLong));
      } else {
        names.push_back(sample.names()[i]);
        tensors.push_back(sample.tensors()[i]);
      }
    }
    sample = ferry::SampleFields(std::move(names), std::move(tensors));
  }

  bool same_every_epoch() const override { return jitter_ == 0; }

 private:
  std::string field_;
  int64_t label_;
  double jitter_;
};

}  // namespace

ferry::TransformKind split_label_transform_kind() {
  using Type = ferry::KeySpec::Type;
  ferry::TransformKind kind;
  kind.name = "split_label";
  kind.description = "One column of a float32 [columns] record becomes an int64 `label`, the others `features`.";
  kind.keys = {
      {.name = "field",
       .type = Type::kString,
       .description = "The record's field.",
       .default_value = "record",
       .example = "record",
       .min = 1},
      {.name = "label",
       .type = Type::kInteger,
       .description = "The column (from 0) that holds the label.",
       .default_value = "required",
       .required = true,
       .example = "4",
       .min = 0,
       .max = 4095},
      {.name = "jitter",
       .type = Type::kNumber,
       .description = "Uniform noise in [-jitter, jitter) added to each feature, drawn per sample and epoch.",
       .default_value = "0",
       .example = "0.01",
       .min = 0},
  };
  kind.make = [](const ferry::KeyValue& keys) -> std::shared_ptr<const ferry::Transform> {
    return std::make_shared<SplitLabel>(keys.text_or("field", "record"), keys.at("label").integer(),
                                        keys.number_or("jitter", 0));
  };
  return kind;
}

}  // namespace records
