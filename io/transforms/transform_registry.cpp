#include "ferry/io/transforms/transform_registry.h"

#include <algorithm>

#include "ferry/io/transforms/builtin_transforms.h"
#include "ferry/pipeline/error.h"

namespace ferry {

TransformRegistry::TransformRegistry() {
  add(detail::drop_transform_kind());
  add(detail::rename_transform_kind());
  add(detail::box_transform_kind());
  add(detail::python_transform_kind());
}

TransformRegistry& TransformRegistry::global() {
  static TransformRegistry registry;
  return registry;
}

std::shared_ptr<const Transform> TransformRegistry::make(std::string_view name, const KeyValue& keys,
                                                         const MakeContext& context) const {
  const std::shared_ptr<const TransformKind> found = kind(name);
  if (!found) {
    std::string known;
    for (const std::string& registered : names()) known += (known.empty() ? "" : ", ") + registered;
    throw Error("unknown transform '" + std::string(name) + "'; registered transforms: " + known);
  }
  std::shared_ptr<const Transform> transform = found->make ? found->make(keys) : found->make_in(keys, context);
  if (!transform) throw Error("transform '" + std::string(name) + "' made no transform (null)");
  return transform;
}

std::vector<FieldSpec> transformed_fields(std::vector<FieldSpec> fields,
                                          const std::vector<std::shared_ptr<const Transform>>& transforms) {
  for (size_t t = 0; t < transforms.size(); ++t) {
    const std::string which = "transform " + std::to_string(t) + " ('" + std::string(transforms[t]->name()) + "')";
    try {
      fields = transforms[t]->output_fields(fields);
    } catch (const std::exception& e) {
      throw Error(which + ": " + cause_of(e));
    }
    if (fields.empty()) throw Error(which + " leaves the sample no field");
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i].name.empty()) throw Error(which + " declares an output field without a name");
      for (size_t j = 0; j < i; ++j) {
        if (fields[j].name == fields[i].name) {
          throw Error(which + " declares the output field '" + fields[i].name + "' twice");
        }
      }
      for (size_t d = fields[i].variable() ? 1 : 0; d < fields[i].shape.size(); ++d) {
        if (fields[i].shape[d] < 0) {
          throw Error(which + ": output field '" + fields[i].name + "' has a negative dimension");
        }
      }
    }
  }
  return fields;
}

}  // namespace ferry
