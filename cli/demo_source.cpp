#include "cli/demo_source.h"

namespace ferry::cli {

SyntheticOptions demo_source_options() {
  SyntheticOptions options;
  options.seed = 7;
  options.samples = 16384;
  options.fields = {
      SyntheticField{"image", at::kByte, {3, 64, 64}, false, 0, 0, std::nullopt},
      SyntheticField{"label", at::kLong, {}, false, 0, 0, std::pair{0.0, 1000.0}},
      SyntheticField{"tokens", at::kInt, {}, true, 16, 256, std::pair{0.0, 32000.0}},
  };
  return options;
}

}  // namespace ferry::cli
