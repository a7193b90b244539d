// Note [auto: the faster decoder], on a machine without a GPU: a stand-in for the GPU decoder (a decode
// stage that says GpuShare::kAuto, takes a group's samples as pending and decodes them in run_pending
// after a pause, as the hardware would) shows how the decode node routes groups. Before the stand-in is
// ready every sample is decoded on the CPU; once it is, every group goes to it while its rate is
// measured, and then to the faster path; every delivered byte equals the source's, in the sampler's
// order, at every thread count. The choice's arithmetic is auto_decode_choice_test.cpp's; the real
// decoder's pixels and speed are tests/cuda/jpeg_gpu_cuda_test.cpp's and bench/'s.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/io/formats/synthetic_source.h>
#include <ferry/pipeline/auto_decode_choice.h>
#include <ferry/pipeline/error.h>
#include <ferry/pipeline/pipeline.h>
#include <ferry/pipeline/stage.h>
#include <ferry/stages/standard_pipeline.h>
#include <ferry/stages/standard_stages.h>
#include "tests/support/reference_batch.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

SyntheticOptions dataset(uint64_t samples) {
  SyntheticOptions options;
  options.seed = 11;
  options.samples = samples;
  options.fields = {
      SyntheticField{"image", at::kByte, {3, 8, 8}, false, 0, 0, std::nullopt},
      SyntheticField{"tokens", at::kInt, {}, true, 1, 30, std::nullopt},
  };
  return options;
}

// Wraps the real decode stage. A GPU-routed sample is read here but left pending; run_pending() decodes
// the group after a pause. A CPU-decoded sample takes `cpu_pause` longer, so that the GPU is the faster.
class StandInGpuDecode : public SampleStage {
 public:
  explicit StandInGpuDecode(std::unique_ptr<SampleStage> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  GpuShare gpu_share() const override { return GpuShare::kAuto; }
  size_t gpu_groups() const override { return 2; }
  GpuReadiness gpu_readiness() const override {
    if (!ready.load()) return GpuReadiness::kStarting;
    return warm.load() ? GpuReadiness::kWarm : GpuReadiness::kReady;
  }

  void run(SampleWork& work) override {
    if (!work.on_gpu) {
      inner_->run(work);
      if (cpu_pause.count() > 0) std::this_thread::sleep_for(cpu_pause);
      cpu_samples.fetch_add(1);
      return;
    }
    EXPECT_TRUE(ready.load()) << "a sample went to the GPU before it was ready";
    work.pending.push_back(std::make_unique<PendingWork>());
  }

  void run_pending(const std::vector<SampleWork*>& samples,
                   const std::function<void(SampleWork&, std::exception_ptr)>& failed) override {
    (void)failed;
    std::this_thread::sleep_for(2ms);
    for (SampleWork* sample : samples) {
      sample->pending.clear();
      inner_->run(*sample);
      gpu_samples.fetch_add(1);
    }
    gpu_groups_done.fetch_add(1);
  }

  std::atomic<bool> ready{false}, warm{true};
  std::chrono::microseconds cpu_pause{0};
  std::atomic<uint64_t> cpu_samples{0}, gpu_samples{0}, gpu_groups_done{0};

 private:
  std::unique_ptr<SampleStage> inner_;
};

// What a run delivered, where the stand-in says its samples were decoded, and what auto chose.
struct Delivered {
  uint64_t batches = 0;
  uint64_t samples = 0;
  uint64_t cpu_samples = 0, gpu_samples = 0, gpu_groups = 0;
  PipelineStats::GpuDecodeStats gpu;
};

struct Run {
  size_t threads = 1;
  uint64_t ready_after = 0;  // batches taken before the stand-in is ready (0: from the start)
  bool warm = true;          // once ready, its rate is what it will be (else auto never measures it)
  uint64_t epochs = 2;
  std::chrono::microseconds cpu_pause{0};
};

// Runs `epochs` epochs of 2000 samples in batches of 200 (4 groups of 50 a plan), checking every batch
// against the source.
Delivered run_routed(const Run& settings) {
  const auto source = std::make_shared<const SyntheticSource>(dataset(2000));
  PipelineOptions options;
  options.device = "cpu";
  options.batch_size = 200;
  options.epochs = settings.epochs;
  options.decode_threads = settings.threads;
  options.prefetch = 2;
  StageSet stages = make_standard_stages(source, options);
  auto owned = std::make_unique<StandInGpuDecode>(std::move(stages.decode));
  StandInGpuDecode& stand_in = *owned;
  stand_in.ready = settings.ready_after == 0;
  stand_in.warm = settings.warm;
  stand_in.cpu_pause = settings.cpu_pause;
  stages.decode = std::move(owned);
  Pipeline pipeline = pipeline_from_stages(std::move(stages), options);
  Delivered run;
  while (auto batch = pipeline.next()) {
    EXPECT_EQ(testing::compare_with_reference(*batch, *source), "") << "batch " << run.batches;
    EXPECT_EQ(batch->index(), run.batches % 10) << "batches in the sampler's order";
    ++run.batches;
    run.samples += batch->batch_size();
    if (run.batches == settings.ready_after) stand_in.ready = true;
  }
  run.cpu_samples = stand_in.cpu_samples.load();
  run.gpu_samples = stand_in.gpu_samples.load();
  run.gpu_groups = stand_in.gpu_groups_done.load();
  run.gpu = pipeline.stats().gpu_decode;
  return run;
}

class GpuDecodeRouting : public ::testing::TestWithParam<size_t> {};

TEST_P(GpuDecodeRouting, BeforeTheGpuIsReadyTheCpuDecodesEverything) {
  const Delivered run = run_routed({.threads = GetParam(), .ready_after = 1000});
  EXPECT_EQ(run.batches, 20u);
  EXPECT_EQ(run.samples, 4000u);
  EXPECT_EQ(run.gpu_samples, 0u);
  EXPECT_EQ(run.cpu_samples, 4000u);
  EXPECT_EQ(run.gpu.auto_choice, "warming");
}

TEST_P(GpuDecodeRouting, OnceReadyEveryGroupGoesToTheGpuUntilItsRateIsMeasured) {
  // Never warm: its rate is never measured, so it keeps every group.
  const Delivered run = run_routed({.threads = GetParam(), .ready_after = 0, .warm = false});
  EXPECT_EQ(run.samples, 4000u);
  EXPECT_EQ(run.gpu_samples, 4000u);
  EXPECT_EQ(run.cpu_samples, 0u);
  EXPECT_EQ(run.gpu_groups, 80u);
  EXPECT_EQ(run.gpu.auto_choice, "trying");
  EXPECT_EQ(run.gpu.auto_cpu_images_per_second, 0.0) << "nothing decoded on the CPU before";
}

TEST_P(GpuDecodeRouting, TheGpuJoinsWhenItBecomesReadyMidRun) {
  const Delivered run = run_routed({.threads = GetParam(), .ready_after = 3});
  EXPECT_EQ(run.samples, 4000u);
  EXPECT_EQ(run.gpu_samples + run.cpu_samples, 4000u);
  // Batches 0..3 and the prefetched ones were planned and begun on the CPU, the rest on the GPU (how many
  // of each depends on timing).
  EXPECT_GT(run.gpu_samples, 0u);
  EXPECT_GE(run.cpu_samples, 3u * 200u);
}

TEST_P(GpuDecodeRouting, AutoKeepsTheFasterPathOnceItHasMeasuredBoth) {
  // 1 ms a CPU-decoded sample: the CPU threads are far slower than the stand-in's GPU. After 8 batches
  // on the CPU (a rate to compare), the GPU decodes 16384 images (AutoDecodeChoice::kGpuWindowImages)
  // while it is measured, then keeps the rest.
  const Delivered run = run_routed({.threads = GetParam(), .ready_after = 8, .epochs = 12, .cpu_pause = 1ms});
  EXPECT_EQ(run.samples, 24000u);
  EXPECT_EQ(run.gpu_samples + run.cpu_samples, 24000u) << "each sample decoded once";
  EXPECT_EQ(run.gpu.auto_choice, "gpu");
  EXPECT_GT(run.gpu.auto_cpu_images_per_second, 0.0);
  EXPECT_GT(run.gpu.auto_gpu_images_per_second, run.gpu.auto_cpu_images_per_second);
  EXPECT_GE(run.cpu_samples, 8u * 200u);
  EXPECT_GE(run.gpu_samples, AutoDecodeChoice::kGpuWindowImages);
}

// A stand-in for `device: gpu` (every group to the GPU) whose first field waits for the "hardware" while
// the others are decoded at once, so they are placed in the slab before the first is decoded (Note
// [placing samples]); the hardware fails the samples `fails` names. Their CPU-decoded replacements must
// take every slot, the placed ones too.
class FailingGpuDecode : public SampleStage {
 public:
  FailingGpuDecode(std::unique_ptr<SampleStage> inner, std::function<bool(uint64_t)> fails)
      : inner_(std::move(inner)), fails_(std::move(fails)) {}
  std::string_view name() const override { return inner_->name(); }
  GpuShare gpu_share() const override { return GpuShare::kAll; }
  size_t gpu_groups() const override { return 2; }
  GpuReadiness gpu_readiness() const override { return GpuReadiness::kWarm; }

  void run(SampleWork& work) override {
    inner_->run(work);
    if (!work.on_gpu) return;  // a replacement
    work.fields[0] = at::Tensor();
    work.pending.push_back(std::make_unique<PendingWork>());
  }

  void run_pending(const std::vector<SampleWork*>& samples,
                   const std::function<void(SampleWork&, std::exception_ptr)>& failed) override {
    for (SampleWork* sample : samples) {
      if (fails_(sample->index())) {
        failed(*sample, std::make_exception_ptr(Error("the stand-in's hardware failed")));
        continue;
      }
      SampleWork again;  // the first field, decoded now
      again.plan = sample->plan;
      again.position = sample->position;
      again.replacement = sample->replacement;
      inner_->run(again);
      sample->fields[0] = again.fields[0];
      sample->pending.clear();
    }
  }

 private:
  std::unique_ptr<SampleStage> inner_;
  std::function<bool(uint64_t)> fails_;
};

TEST(GpuDecodeFailures, AReplacementTakesTheSlotsItsFailedSampleWasPlacedIn) {
  SyntheticOptions data = dataset(600);
  data.fields.insert(data.fields.begin() + 1,
                     SyntheticField{"label", at::kLong, {}, false, 0, 0, std::pair{0.0, 1000.0}});
  const auto source = std::make_shared<const SyntheticSource>(data);
  const auto fails = [](uint64_t index) { return index % 13 == 5; };
  for (const size_t threads : {1, 2, 4}) {
    SCOPED_TRACE(std::to_string(threads) + " decode threads");
    PipelineOptions options;
    options.device = "cpu";
    options.batch_size = 50;
    options.decode_threads = threads;
    options.prefetch = 2;
    options.on_error = OnError::kSkip;
    options.skip_replaces = true;
    StageSet stages = make_standard_stages(source, options);
    ASSERT_NE(stages.placer, nullptr);
    stages.decode = std::make_unique<FailingGpuDecode>(std::move(stages.decode), fails);
    Pipeline pipeline = pipeline_from_stages(std::move(stages), options);
    uint64_t samples = 0, replaced = 0;
    while (auto batch = pipeline.next()) {
      EXPECT_EQ(testing::compare_with_reference(*batch, *source), "") << "batch " << batch->index();
      for (const uint64_t index : batch->sample_indices()) {
        EXPECT_FALSE(fails(index)) << "a failed sample was delivered";
        ++samples;
      }
    }
    for (uint64_t index = 0; index < 600; ++index) replaced += fails(index) ? 1 : 0;
    const PipelineStats stats = pipeline.stats();
    EXPECT_EQ(samples, 600u);
    EXPECT_EQ(stats.skipped_samples, replaced);
    // Decoded on the stand-in's GPU, a sample places its label (8 bytes); a replacement, decoded on the
    // CPU, its image and label (192 + 8). A failed sample's placed label is not counted.
    EXPECT_EQ(stats.placed_bytes, (samples - replaced) * 8 + replaced * (192 + 8));
  }
}

INSTANTIATE_TEST_SUITE_P(DecodeThreads, GpuDecodeRouting, ::testing::Values(1, 2, 4, 8),
                         [](const ::testing::TestParamInfo<size_t>& threads) {
                           return std::to_string(threads.param) + "_threads";
                         });

}  // namespace
}  // namespace ferry
