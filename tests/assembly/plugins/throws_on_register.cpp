// A plugin whose entry point fails after it registered a source kind: nothing of it may be registered.
#include <ferry/assembly/plugin.h>

FERRY_PLUGIN(registrar) {
  ferry::SourceKind kind;
  kind.name = "half_registered";
  kind.make = [](const ferry::KeyValue&) -> std::shared_ptr<const ferry::Source> { return nullptr; };
  registrar.add_source_kind(std::move(kind));
  throw ferry::Error("cannot find its model file");
}
