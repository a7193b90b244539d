// Note [auto: the faster decoder]: the choice between the CPU threads and the GPU, from rates measured
// over finished groups, with the clock given by the test.
#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/pipeline/auto_decode_choice.h>

namespace ferry {
namespace {

using Path = AutoDecodeChoice::Path;
using Phase = AutoDecodeChoice::Phase;
constexpr uint64_t kMs = 1'000'000;

// Groups of 64 images finishing on `path` every `gap_ns` from `from_ns`: `groups` of them. Returns the
// time of the last.
uint64_t finish(AutoDecodeChoice& choice, Path path, int groups, uint64_t from_ns, uint64_t gap_ns) {
  uint64_t now = from_ns;
  for (int g = 0; g < groups; ++g) {
    now += gap_ns;
    choice.finished(path, 64, now);
  }
  return now;
}

TEST(AutoDecodeChoice, TheCpuDecodesUntilTheGpuIsReadyThenTheGpuWhileItIsMeasured) {
  AutoDecodeChoice choice(/*gpu_window_images=*/64 * 10, /*min_cpu_images=*/64 * 4, 0.05);
  EXPECT_EQ(choice.route(false, false), Path::kCpu);
  EXPECT_EQ(choice.outcome().phase, Phase::kWarming);
  // 1 + 20 groups, 2 ms apart: the first opens the window, then 20 x 64 images in 40 ms.
  const uint64_t now = finish(choice, Path::kCpu, 21, 0, 2 * kMs);
  EXPECT_EQ(choice.route(true, false), Path::kGpu);
  AutoDecodeChoice::Outcome outcome = choice.outcome();
  EXPECT_EQ(outcome.phase, Phase::kTrying);
  EXPECT_NEAR(outcome.cpu_images_per_second, 32'000.0, 1e-6);
  // Not settled: the GPU's groups are not measured yet, however many.
  finish(choice, Path::kGpu, 50, now, kMs);
  EXPECT_EQ(choice.outcome().phase, Phase::kTrying);
  EXPECT_EQ(choice.outcome().gpu_images_per_second, 0.0);
  // CPU groups still in flight from before finish later: they count for nothing now.
  choice.finished(Path::kCpu, 64, now + 60 * kMs);
  EXPECT_NEAR(choice.outcome().cpu_images_per_second, 32'000.0, 1e-6);
}

TEST(AutoDecodeChoice, KeepsTheGpuWhenItIsFasterAndTheCpuWhenItIsFasterByMoreThanTheMargin) {
  struct Case {
    uint64_t cpu_gap_ns, gpu_gap_ns;
    Phase chosen;
  };
  // 64 images per gap: 1 ms is 64k images/s, 2 ms 32k.
  for (const Case& c : {Case{2 * kMs, kMs, Phase::kGpu},          // GPU 64k against CPU 32k
                        Case{kMs, 2 * kMs, Phase::kCpu},          // CPU 64k against GPU 32k
                        Case{1'000'000, 1'040'000, Phase::kGpu},  // CPU faster by 4%: a tie, the GPU stays
                        Case{1'000'000, 1'060'000, Phase::kCpu}}) {
    SCOPED_TRACE(std::to_string(c.cpu_gap_ns) + " ns against " + std::to_string(c.gpu_gap_ns) + " ns");
    AutoDecodeChoice choice(64 * 10, 64 * 4, 0.05);
    EXPECT_EQ(choice.route(false, false), Path::kCpu);
    uint64_t now = finish(choice, Path::kCpu, 11, 0, c.cpu_gap_ns);
    EXPECT_EQ(choice.route(true, true), Path::kGpu);
    now = finish(choice, Path::kGpu, 10, now, c.gpu_gap_ns);  // the window's opening group and 9 more
    EXPECT_EQ(choice.outcome().phase, Phase::kTrying) << "9 x 64 images are short of the window";
    finish(choice, Path::kGpu, 1, now, c.gpu_gap_ns);
    const AutoDecodeChoice::Outcome outcome = choice.outcome();
    EXPECT_EQ(outcome.phase, c.chosen);
    EXPECT_NEAR(outcome.gpu_images_per_second, 64.0 * 1e9 / static_cast<double>(c.gpu_gap_ns), 1e-6);
    const Path kept = c.chosen == Phase::kGpu ? Path::kGpu : Path::kCpu;
    for (int g = 0; g < 3; ++g) EXPECT_EQ(choice.route(true, true), kept) << "the choice is kept";
    EXPECT_EQ(choice.route(false, false), kept) << "whatever the GPU says later";
  }
}

TEST(AutoDecodeChoice, ACpuWindowTooShortToMeasureKeepsTheGpu) {
  AutoDecodeChoice choice(64 * 10, 64 * 4, 0.05);
  finish(choice, Path::kCpu, 4, 0, kMs / 10);  // 3 x 64 counted: fewer than 4 x 64, however fast
  EXPECT_EQ(choice.route(true, true), Path::kGpu);
  EXPECT_EQ(choice.outcome().cpu_images_per_second, 0.0);
  finish(choice, Path::kGpu, 11, 10 * kMs, 10 * kMs);
  EXPECT_EQ(choice.outcome().phase, Phase::kGpu);
  // Ready from the start: no CPU window at all.
  AutoDecodeChoice at_once(64 * 10, 64 * 4, 0.05);
  EXPECT_EQ(at_once.route(true, true), Path::kGpu);
  finish(at_once, Path::kGpu, 11, 0, 10 * kMs);
  EXPECT_EQ(at_once.outcome().phase, Phase::kGpu);
}

TEST(AutoDecodeChoice, PhaseNamesAreTheReportsWords) {
  EXPECT_EQ(AutoDecodeChoice::phase_name(Phase::kWarming), "warming");
  EXPECT_EQ(AutoDecodeChoice::phase_name(Phase::kTrying), "trying");
  EXPECT_EQ(AutoDecodeChoice::phase_name(Phase::kGpu), "gpu");
  EXPECT_EQ(AutoDecodeChoice::phase_name(Phase::kCpu), "cpu");
}

// Decode tasks route and finish groups on many threads at once (ThreadSanitizer runs this): every
// group's route is kept by the end, and one choice is made.
TEST(AutoDecodeChoice, ThreadsRouteAndFinishAtOnce) {
  for (const int threads : {2, 4, 8}) {
    AutoDecodeChoice choice(64 * 200, 64 * 50, 0.05);
    std::atomic<uint64_t> clock{0};
    std::atomic<bool> ready{false};
    std::atomic<int> cpu_after_choice{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int g = 0; g < 400; ++g) {
          if (t == 0 && g == 100) ready = true;
          // The phase as it stood before route(): phases only move forward, so a choice of the GPU seen
          // before the call binds it. Read after it, a choice made meanwhile by another thread would
          // count the CPU path it rightly took before that choice.
          const Phase phase = choice.outcome().phase;
          const Path path = choice.route(ready.load(), ready.load());
          if (phase == Phase::kGpu && path == Path::kCpu) ++cpu_after_choice;
          choice.finished(path, 64, clock.fetch_add(kMs / 4) + kMs / 4);
        }
      });
    }
    for (std::thread& worker : workers) worker.join();
    EXPECT_NE(choice.outcome().phase, Phase::kWarming) << threads << " threads";
    EXPECT_EQ(cpu_after_choice.load(), 0);
  }
}

}  // namespace
}  // namespace ferry
