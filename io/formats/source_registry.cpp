#include "ferry/io/formats/source_registry.h"

#include "ferry/io/formats/builtin_source_kinds.h"

namespace ferry {

SourceRegistry::SourceRegistry() {
  add(detail::synthetic_source_kind());
  add(detail::megatron_source_kind());
  add(detail::tokens_source_kind());
  add(detail::tar_source_kind());
  add(detail::image_folder_source_kind());
  add(detail::python_source_kind());
}

SourceRegistry& SourceRegistry::global() {
  static SourceRegistry registry;
  return registry;
}

}  // namespace ferry
