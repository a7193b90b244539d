// A plugin that registers a new transform and a decoder named like a built-in one: refused as a whole.
#include <ferry/assembly/plugin.h>

namespace {

class Identity : public ferry::Transform {
 public:
  std::string_view name() const override { return "identity"; }
  std::vector<ferry::FieldSpec> output_fields(const std::vector<ferry::FieldSpec>& input) const override {
    return input;
  }
  void apply(ferry::SampleFields&, const ferry::SampleContext&) const override {}
};

}  // namespace

FERRY_PLUGIN(registrar) {
  ferry::TransformKind identity;
  identity.name = "identity";
  identity.make = [](const ferry::KeyValue&) -> std::shared_ptr<const ferry::Transform> {
    return std::make_shared<Identity>();
  };
  registrar.add_transform(std::move(identity));
  ferry::DecoderKind raw;
  raw.name = "raw";
  raw.make = [](const ferry::DecoderArgs&) -> std::shared_ptr<const ferry::Decoder> { return nullptr; };
  registrar.add_decoder(std::move(raw));
}
