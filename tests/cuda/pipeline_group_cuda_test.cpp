// transfer.devices on GPUs: one process feeding every visible GPU (on a machine with one, cuda:0 and the
// CPU), each device's batches on that device, byte for byte the source's, and the samples rank d of N
// would get; the report names each device. The logic of a group (order, resume, failures) is tested on
// the CPU by tests/integration/pipeline_group_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/build_config.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/pipeline_group.h>
#include "tests/support/reference_batch.h"

#if FERRY_WITH_GPU
#include <c10/cuda/CUDAStream.h>
#endif

namespace ferry {
namespace {

#if FERRY_WITH_GPU

const char* kSource =
    "source:\n  kind: synthetic\n  samples: 1001\n  seed: 13\n  fields:\n"
    "    - {name: x, dtype: float32, shape: [16, 9]}\n"
    "    - {name: ids, dtype: int32, shape: [], length: [1, 200], range: [0, 50000]}\n"
    "    - {name: h, dtype: float16, shape: [3]}\n"
    "batch_size: 24\nprefetch: 4\nsampler:\n  shuffle: true\n  seed: 3\n  epochs: 2\ndecode:\n  threads: 4\n";

SyntheticOptions source_options() {
  SyntheticOptions options;
  options.seed = 13;
  options.samples = 1001;
  options.fields = {
      SyntheticField{"x", at::kFloat, {16, 9}, false, 0, 0, std::nullopt},
      SyntheticField{"ids", at::kInt, {}, true, 1, 200, std::pair{0.0, 50000.0}},
      SyntheticField{"h", at::kHalf, {3}, false, 0, 0, std::nullopt},
  };
  return options;
}

// Every GPU; with one, cuda:0 and the CPU (a group may mix them).
std::vector<std::string> devices_here() {
  std::vector<std::string> devices;
  for (int d = 0; d < cuda_device_count(); ++d) devices.push_back("cuda:" + std::to_string(d));
  if (devices.size() == 1) devices.push_back("cpu");
  return devices;
}

TEST(PipelineGroupCuda, EveryDeviceGetsItsShareOnItselfEveryByteTheSources) {
  if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) ::unsetenv(name);
  const std::vector<std::string> devices = devices_here();
  std::string list;
  for (const std::string& device : devices) list += (list.empty() ? "" : ", ") + device;
  const SyntheticSource truth(source_options());
  const Config config = parse_config(kSource, "<test>", {"transfer.devices=[" + list + "]"});
  PipelineGroup group = make_pipeline_group(config, check_config(config));
  ASSERT_EQ(group.size(), devices.size());

  // What rank d of N delivers alone, to the CPU: the samples device d must get.
  std::vector<std::vector<std::vector<uint64_t>>> ranks(devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    Pipeline alone = make_pipeline(parse_config(kSource, "<test>",
                                                {"transfer.device=cpu", "sampler.rank=" + std::to_string(d),
                                                 "sampler.world_size=" + std::to_string(devices.size())}));
    for (const Batch& batch : alone) ranks[d].push_back(batch.sample_indices());
  }
  size_t steps = 0;
  for (const BatchGroup& step : group) {
    ASSERT_EQ(step.size(), devices.size());
    for (size_t d = 0; d < step.size(); ++d) {
      const Batch& batch = step[d];
      ASSERT_EQ(batch.device().str(), devices[d]) << "step " << steps;
      for (const at::Tensor& field : batch.tensors()) EXPECT_EQ(field.device().str(), devices[d]);
      ASSERT_LT(steps, ranks[d].size());
      EXPECT_EQ(batch.sample_indices(), ranks[d][steps]) << "device " << devices[d] << ", step " << steps;
      const std::string problem = testing::compare_with_reference(batch, truth);
      ASSERT_EQ(problem, "") << "device " << devices[d] << ", step " << steps;
    }
    ++steps;
  }
  EXPECT_EQ(steps, ranks[0].size());
  const std::vector<PipelineStats> stats = group.stats();
  for (size_t d = 0; d < devices.size(); ++d) {
    EXPECT_EQ(stats[d].device, devices[d]);
    EXPECT_EQ(stats[d].batches, steps);
    EXPECT_EQ(stats[d].pool.pinned, devices[d] != "cpu") << devices[d];
    EXPECT_EQ(stats[d].pool.leased_bytes, 0u);
  }
}

// A group destroyed mid-run, batches in flight on every GPU, at several moments: nothing hangs or crashes
// (the CTest timeout catches a hang), and a new group starts on the same devices each time.
TEST(PipelineGroupCuda, DestroyedMidRunWithBatchesInFlightOnEveryDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
  std::string list;
  for (const std::string& device : devices_here()) list += (list.empty() ? "" : ", ") + device;
  const Config config = parse_config(kSource, "<test>", {"transfer.devices=[" + list + "]", "sampler.epochs=50"});
  const auto source = check_config(config);
  for (int round = 0; round < 5; ++round) {
    PipelineGroup group = make_pipeline_group(config, source);
    for (int step = 0; step < round * 3; ++step) ASSERT_TRUE(group.next());
  }
}

#else

TEST(PipelineGroupCuda, NeedsAGpuBuild) { GTEST_SKIP() << "not a GPU build: " FERRY_BUILD_REASON; }

#endif

}  // namespace
}  // namespace ferry
