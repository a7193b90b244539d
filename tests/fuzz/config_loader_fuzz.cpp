// The YAML config loader (parse_config, what `ferry run` and `ferry validate` do first) on hostile
// config text with `--set` overrides: every line of the input that starts with "#set " is one
// override (the rest of the line), and stays a comment to the YAML parser, so seeds are plain
// configs. A config that loads with a synthetic source also goes through check_config() (the source
// is made, slab and pinned-memory sizes are checked), the planner's batch count and the order record
// a saved state carries: what `ferry validate` and the start of `ferry run` do, short of threads.
// Sources that read files are left at the loader: their paths would point anywhere on this machine.
// Inputs whose shard patterns expand to many paths are skipped (few_paths()).

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include "tests/fuzz/fuzz_support.h"

namespace {

// Whether the brace groups anywhere in `text` ("{000000..999999}", "{a,b}") multiply to at most
// kMaxPaths alternatives. The loader stat()s every path a tar source's pattern expands to (up to a
// million, by design): under ASan that takes seconds per input, and the fuzzer, having found one
// such input, spent most of its time on them while covering nothing that a few paths do not.
bool few_paths(std::string_view text) {
  constexpr double kMaxPaths = 4096;
  double paths = 1;
  for (size_t open = text.find('{'); open != std::string_view::npos; open = text.find('{', open + 1)) {
    const size_t close = text.find('}', open);
    if (close == std::string_view::npos) break;
    const std::string_view group = text.substr(open + 1, close - open - 1);
    if (const size_t dots = group.find(".."); dots != std::string_view::npos) {
      int64_t first = 0, last = 0;
      const std::string_view a = group.substr(0, dots), b = group.substr(dots + 2);
      if (std::from_chars(a.data(), a.data() + a.size(), first).ec != std::errc() ||
          std::from_chars(b.data(), b.data() + b.size(), last).ec != std::errc()) {
        continue;
      }
      paths *= std::abs(static_cast<double>(last) - static_cast<double>(first)) + 1;
    } else {
      paths *= static_cast<double>(std::count(group.begin(), group.end(), ',') + 1);
    }
    if (paths > kMaxPaths) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!few_paths(text)) return -1;  // -1: not added to the corpus
  std::vector<std::string> overrides;
  for (size_t line = 0; line < text.size();) {
    const size_t end = std::min(text.find('\n', line), text.size());
    if (text.substr(line, end - line).starts_with("#set "))
      overrides.emplace_back(text.substr(line + 5, end - line - 5));
    line = end + 1;
  }
  ferry::fuzz::refused_or_ok([&] {
    const ferry::Config config = ferry::parse_config(text, "<fuzz config>", overrides);
    if (config.source.kind != "synthetic") return;
    const std::shared_ptr<const ferry::Source> source = ferry::check_config(config);
    FERRY_FUZZ_CHECK(source != nullptr);
    const ferry::Placement placement = ferry::resolve_placement(config.sampler, std::nullopt);
    const ferry::PipelineOptions options = ferry::resolve_pipeline_options(config, placement);
    (void)ferry::planned_batches(config, options, *source);
    (void)ferry::batch_order(config, placement, *source);
    (void)ferry::make_field_decoders(config, *source);
  });
  return 0;
}
