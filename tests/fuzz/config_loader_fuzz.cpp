// The YAML config loader (parse_config, what `ferry run` and `ferry validate` do first) on hostile
// config text with `--set` overrides: every line of the input that starts with "#set " is one
// override (the rest of the line), and stays a comment to the YAML parser, so seeds are plain
// configs. A config that loads with a synthetic source also goes through check_config() (the source
// is made, slab and pinned-memory sizes are checked), the planner's batch count and the order record
// a saved state carries: what `ferry validate` and the start of `ferry run` do, short of threads.
// Sources that read files are left at the loader: their paths would point anywhere on this machine.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
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
