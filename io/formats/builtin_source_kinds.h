#pragma once

#include <string>
#include <vector>

#include "ferry/io/formats/source_registry.h"

// The built-in source kinds, each defined beside its reader (synthetic_kind.cpp, ...), which
// SourceRegistry's constructor registers. Internal: not installed.

namespace ferry::detail {

SourceKind synthetic_source_kind();
SourceKind megatron_source_kind();
SourceKind tokens_source_kind();
SourceKind tar_source_kind();
/// JSON-lines files (jsonl_kind.cpp).
SourceKind jsonl_source_kind();
SourceKind image_folder_source_kind();
/// Defined in io/workers/, which runs user Python code in worker processes.
SourceKind python_source_kind();
/// A weighted mixture of sources (`source: {mix: [{weight, source}, ...]}`), in mixture_kind.cpp.
SourceKind mixture_source_kind();

/// A decoder of one image format named for files of another (png files through jpeg) fails on every
/// sample: said now, at the `decoder` of `field` (the mapping that names it), with the decoder that reads
/// them. `extensions` are the files' ("seg.png").
void check_image_extensions(const KeyValue& field, const std::string& decoder,
                            const std::vector<std::string>& extensions, KeyProblems& problems);

}  // namespace ferry::detail
