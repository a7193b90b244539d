// Profiler ranges (Note [profiler ranges]): with a torch profiler's callback registered for every thread,
// every stage's work on every batch is a user scope "ferry::<stage>". (The NVTX ranges: nvtx_range_test.)
#include <map>
#include <mutex>
#include <string>

#include <ATen/record_function.h>
#include <gtest/gtest.h>

#include <ferry/stages/standard_pipeline.h>
#include "tests/support/reference_batch.h"

namespace ferry {
namespace {

std::shared_ptr<const SyntheticSource> dataset() {
  SyntheticOptions data;
  data.seed = 4;
  data.samples = 90;
  data.fields = {SyntheticField{"x", at::kFloat, {7}, false, 0, 0, std::nullopt}};
  return std::make_shared<SyntheticSource>(data);
}

// Runs a pipeline over `truth` to its end, checking every batch; returns its stats.
PipelineStats run(const std::shared_ptr<const SyntheticSource>& truth) {
  PipelineOptions options;
  options.device = "cpu";
  options.decode_threads = 3;
  options.batch_size = 6;
  options.prefetch = 4;
  Pipeline pipeline = make_pipeline(truth, options);
  while (auto batch = pipeline.next()) EXPECT_EQ(testing::compare_with_reference(*batch, *truth), "");
  return pipeline.stats();
}

// What a torch profiler that records every thread sees: the user scopes' names, counted.
std::mutex g_scopes_mutex;
std::map<std::string, unsigned long long> g_scopes;

std::unique_ptr<at::ObserverContext> count_scope(const at::RecordFunction& scope) {
  std::lock_guard lock(g_scopes_mutex);
  ++g_scopes[scope.name()];
  return nullptr;
}

TEST(ProfilerRanges, EachStagesWorkOnEachBatchIsATorchProfilerUserScope) {
  const at::CallbackHandle handle =
      at::addGlobalCallback(at::RecordFunctionCallback(&count_scope).scopes({at::RecordScope::USER_SCOPE}));
  const PipelineStats stats = run(dataset());
  at::removeCallback(handle);
  std::lock_guard lock(g_scopes_mutex);
  EXPECT_GE(g_scopes["ferry::plan"], stats.planner.items_out);
  EXPECT_GE(g_scopes["ferry::decode"], 1u);
  for (const StageStats& stage : stats.stages) {
    if (stage.name != "decode") {
      EXPECT_EQ(g_scopes["ferry::" + stage.name], stage.items) << stage.name;
    }
  }
}

}  // namespace
}  // namespace ferry
