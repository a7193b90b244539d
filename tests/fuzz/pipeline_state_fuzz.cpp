// The resume-state loader (parse_pipeline_state, what `ferry run --resume` and Python's
// load_state_dict read) on hostile state text, then the resume it asks for, planned over two fixed
// small configs (no thread started: planner_of() is the planner the pipeline would run).
//
// Promises checked: a state that loads writes (to_json) and loads back the same; a resumed planner
// plans exactly total_batches() batches (what len() and progress report), each with samples of the
// source and within the run's epochs.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/assembly/configured_planner.h>
#include <ferry/assembly/pipeline_state_loader.h>
#include "tests/fuzz/fuzz_support.h"

namespace {

// 100 samples in batches of 7 over 3 epochs (15 a epoch, the last one short); the second drops the
// short batch, skips bad samples (its plans are refilled, with epoch-end markers) and stops at 20.
constexpr const char* kConfigs[] = {
    R"(
source: {kind: synthetic, samples: 100, fields: [{name: x, dtype: uint8, shape: [4]}]}
batch_size: 7
sampler: {shuffle: true, seed: 3, epochs: 3}
transfer: {device: cpu}
)",
    R"(
source: {kind: synthetic, samples: 100, fields: [{name: x, dtype: uint8, shape: [4]}]}
batch_size: 7
max_batches: 20
sampler: {shuffle: true, seed: 3, epochs: 3, drop_last: true}
decode: {on_error: skip}
transfer: {device: cpu}
)"};

struct Resumable {
  ferry::Config config;
  std::shared_ptr<const ferry::Source> source;
};

// The configs and their sources, made once: the fuzzed part is the state.
const std::vector<Resumable>& runs() {
  static const std::vector<Resumable> made = [] {
    std::vector<Resumable> out;
    for (const char* yaml : kConfigs) {
      ferry::Config config = ferry::parse_config(yaml, "<fuzz config>");
      std::shared_ptr<const ferry::Source> source = ferry::check_config(config);
      out.push_back({std::move(config), std::move(source)});
    }
    return out;
  }();
  return made;
}

// Plans a run resumed at `state` and checks the plans against total_batches().
void plan_resumed(const Resumable& run, const ferry::PipelineState& state) {
  ferry::PipelineOptions options = ferry::resolve_pipeline_options(run.config, ferry::Placement{});
  options.first_batch = state.next_batch;
  options.start = state.next;
  ferry::BatchPlanner planner = ferry::planner_of(run.config, options, *run.source);
  const uint64_t total = planner.total_batches();
  // Samples planned; with refill, epoch ends are markers and max_batches is collate's to apply.
  uint64_t batches = 0;
  constexpr uint64_t kMaxPlans = 1000;  // the configs make at most 45 batches
  for (uint64_t plans = 0; plans <= kMaxPlans; ++plans) {
    const std::optional<ferry::BatchPlan> plan = planner.next();
    if (!plan) break;
    if (plan->kind == ferry::BatchPlan::Kind::kEpochEnd) continue;
    FERRY_FUZZ_CHECK(plan->kind == ferry::BatchPlan::Kind::kSamples);
    FERRY_FUZZ_CHECK(plan->epoch < options.epochs);
    FERRY_FUZZ_CHECK(!plan->sample_indices.empty() && plan->sample_indices.size() <= options.batch_size);
    for (const uint64_t sample : plan->sample_indices) FERRY_FUZZ_CHECK(sample < run.source->size());
    ++batches;
  }
  FERRY_FUZZ_CHECK(batches <= kMaxPlans);
  if (!options.refills()) FERRY_FUZZ_CHECK(batches == total);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ferry::fuzz::refused_or_ok([&] {
    const ferry::PipelineState state = ferry::parse_pipeline_state(text, "<fuzz state>");
    const ferry::PipelineState again = ferry::parse_pipeline_state(state.to_json(), "<written state>");
    FERRY_FUZZ_CHECK(again.next_batch == state.next_batch);
    FERRY_FUZZ_CHECK(again.next == state.next);
    FERRY_FUZZ_CHECK(again.order == state.order);
    if (state.last_epoch && state.last_index) {
      FERRY_FUZZ_CHECK(again.last_epoch == state.last_epoch && again.last_index == state.last_index);
    }
    for (const Resumable& run : runs()) plan_resumed(run, state);
  });
  return 0;
}
