// NVTX ranges (Note [profiler ranges]): with an NVTX tool attached — here tests/support/nvtx_recorder.cpp,
// loaded through NVTX_INJECTION64_PATH as Nsight Systems' is — every stage's work on every batch is a
// range in the domain "ferry", named after the stage, and each thread's ranges are closed in order. The
// only test of its binary: NVTX reads the variable at the process's first NVTX call.
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include <ferry/pipeline/profiler_range.h>
#include "tests/support/pipeline_checks.h"

namespace ferry {
namespace {

std::map<std::string, unsigned long long> recorded(void* tool) {
  using Recorded = const char* (*)();
  auto read = reinterpret_cast<Recorded>(::dlsym(tool, "ferry_nvtx_recorded"));
  std::map<std::string, unsigned long long> counts;
  if (read == nullptr) return counts;
  std::istringstream lines(read());
  std::string name;
  unsigned long long count = 0;
  while (lines >> name >> count) counts[name] = count;
  return counts;
}

TEST(ProfilerRanges, EachStagesWorkOnEachBatchIsARangeInTheFerryDomain) {
  if (!detail::nvtx_compiled()) GTEST_SKIP() << "this build has no NVTX (no CUDA toolkit headers)";
  const std::string tool_path = FERRY_NVTX_RECORDER;
  // Read by NVTX at its first call in this process: none has been made yet.
  ::setenv("NVTX_INJECTION64_PATH", tool_path.c_str(), 1);
  // What an earlier round (--gtest_repeat) left in the tool, if it is loaded already.
  std::map<std::string, unsigned long long> before;
  if (void* loaded = ::dlopen(tool_path.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    before = recorded(loaded);
    ::dlclose(loaded);
  }
  const PipelineStats stats = testing::run_small_pipeline();
  void* tool = ::dlopen(tool_path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(tool, nullptr) << "NVTX did not load the tool " << tool_path;
  std::map<std::string, unsigned long long> counts = recorded(tool);
  for (auto& [name, count] : counts) count -= name == "open" || name == "unbalanced" ? 0 : before[name];
  EXPECT_GE(counts["ferry/plan"], stats.planner.items_out) << "a plan a batch (and those that found the end)";
  EXPECT_GE(counts["ferry/decode"], 1u);
  for (const StageStats& stage : stats.stages) {
    if (stage.name == "decode") continue;
    EXPECT_EQ(counts["ferry/" + stage.name], stage.items) << stage.name;
  }
  EXPECT_EQ(counts["open"], 0u) << "ranges left open";
  EXPECT_EQ(counts["unbalanced"], 0u) << "pops without a push";
  ::dlclose(tool);
}

}  // namespace
}  // namespace ferry
