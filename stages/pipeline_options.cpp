#include "ferry/stages/pipeline_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <string>

namespace ferry {

const char* augment_dtype_name(AugmentOptions::DType dtype) noexcept {
  switch (dtype) {
    case AugmentOptions::DType::kFloat32: return "float32";
    case AugmentOptions::DType::kFloat16: return "float16";
    case AugmentOptions::DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

const char* augment_layout_name(AugmentOptions::Layout layout) noexcept {
  return layout == AugmentOptions::Layout::kNCHW ? "NCHW" : "NHWC";
}

std::vector<OptionProblem> PipelineOptions::problems() const {
  std::vector<OptionProblem> found = EngineOptions::problems();
  const auto require = [&](bool ok, const char* option, std::string expected, std::string value) {
    if (!ok) found.push_back({option, std::move(expected), std::move(value)});
  };
  const size_t alignment = transfer.min_alignment;
  require(alignment != 0 && (alignment & (alignment - 1)) == 0 && alignment <= TransferOptions::kMaxAlignment,
          "transfer.min_alignment", "a power of two up to " + std::to_string(TransferOptions::kMaxAlignment),
          std::to_string(alignment));
  require(transfer.max_chunk_bytes >= TransferOptions::kMinChunkBytes, "transfer.max_chunk_bytes",
          "at least " + std::to_string(TransferOptions::kMinChunkBytes), std::to_string(transfer.max_chunk_bytes));
  require(!collate.lengths_suffix.empty(), "collate.lengths_suffix", "a non-empty suffix", "\"\"");
  if (augment.enabled()) {
    const std::string size = std::to_string(augment.height) + " x " + std::to_string(augment.width);
    require((augment.height == 0) == (augment.width == 0) && augment.height >= 0 && augment.width >= 0 &&
                augment.height <= 65535 && augment.width <= 65535,
            "augment.height", "[height, width], each 1..65535", size);
    require(augment.scale_min > 0 && augment.scale_min <= augment.scale_max && augment.scale_max <= 1,
            "augment.scale_min", "[min, max] with 0 < min <= max <= 1",
            std::to_string(augment.scale_min) + ", " + std::to_string(augment.scale_max));
    require(augment.ratio_min > 0 && augment.ratio_min <= augment.ratio_max, "augment.ratio_min",
            "[min, max] with 0 < min <= max",
            std::to_string(augment.ratio_min) + ", " + std::to_string(augment.ratio_max));
    require(augment.flip >= 0 && augment.flip <= 1, "augment.flip", "a probability in 0..1",
            std::to_string(augment.flip));
    for (double deviation : augment.std) {
      require(deviation > 0, "augment.std", "three values > 0", std::to_string(deviation));
    }
    if (augment.normalize) {
      // (x - mean) / std for x in [0, 1] must fit the output dtype: past its largest value every output
      // is +-inf, below its smallest normal one every output is 0 (or lost precision).
      const bool half = augment.dtype == AugmentOptions::DType::kFloat16;
      const double largest = half ? 65504.0 : 3.4e38;
      const double smallest = half ? 6.1e-5 : 1.18e-38;
      for (size_t c = 0; c < 3; ++c) {
        const double mean = augment.mean[c];
        const double deviation = augment.std[c];
        if (!(deviation > 0)) continue;  // said above
        const double span = std::max(std::abs(mean), std::abs(1 - mean));
        const double reach = span / deviation;
        if (std::isfinite(reach) && reach <= largest && reach >= smallest && deviation <= 3.4e38) continue;
        char values[160];
        std::snprintf(values, sizeof values, "mean %g, std %g: outputs up to %g in magnitude", mean, deviation, reach);
        char range[96];
        std::snprintf(range, sizeof range, " (magnitudes %g..%g, for x in 0..1)", smallest, largest);
        require(false, std::isfinite(span) && span <= largest ? "augment.std" : "augment.mean",
                std::string("a mean and std whose (x - mean) / std fits ") + augment_dtype_name(augment.dtype) + range,
                values);
        break;  // one problem for the three channels
      }
    }
  }
  return found;
}

void PipelineOptions::check() const { throw_first(problems()); }

}  // namespace ferry
