#pragma once

#include "io/synthetic_source.h"

namespace ferry::cli {

/// The data of `ferry run` without a config: an image-classification-like sample (uint8 image,
/// int64 label) plus a variable-length token sequence, so the demo exercises stacking, padding and
/// lengths. Generated on the fly; nothing to download.
SyntheticOptions demo_source_options();

}  // namespace ferry::cli
