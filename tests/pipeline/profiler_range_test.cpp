// Profiler ranges (Note [profiler ranges]): with a torch profiler's callback registered for every thread,
// every stage's work on every batch is a user scope "ferry::<stage>". (The NVTX ranges: nvtx_range_test.)
#include <map>
#include <mutex>
#include <string>

#include <ATen/record_function.h>
#include <gtest/gtest.h>

#include "tests/support/pipeline_checks.h"

namespace ferry {
namespace {

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
  const PipelineStats stats = testing::run_small_pipeline();
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
