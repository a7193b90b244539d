// 1000 pipelines created and destroyed, every way a pipeline ends: threads, file descriptors,
// staging bytes and resident memory stay flat. (Python: python/tests/test_lifecycle.py; on the GPU,
// with device memory too: tests/cuda/pipeline_cuda_test.cpp.)
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include <gtest/gtest.h>

#include <ferry/io/formats/synthetic_source.h>
#include <ferry/pipeline/pinned_pool.h>
#include <ferry/stages/standard_pipeline.h>

namespace ferry {
namespace {

// AddressSanitizer keeps freed memory in a quarantine (256 MiB by default) and shadows what is in
// use, so resident memory says nothing about a leak there: the bound is checked in the other builds.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kResidentMemoryMeansSomething = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kResidentMemoryMeansSomething = false;
#else
constexpr bool kResidentMemoryMeansSomething = true;
#endif
#else
constexpr bool kResidentMemoryMeansSomething = true;
#endif

size_t entries(const char* directory) {
  size_t count = 0;
  if (DIR* dir = ::opendir(directory)) {
    while (const dirent* entry = ::readdir(dir)) count += entry->d_name[0] != '.';
    ::closedir(dir);
  }
  return count;
}

size_t resident_bytes() {
  long size = 0;
  long pages = 0;
  if (std::FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld %ld", &size, &pages) != 2) pages = 0;
    std::fclose(statm);
  }
  return static_cast<size_t>(pages) * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

void cycle(int i, std::mt19937_64& rng) {
  SyntheticOptions data;
  data.seed = static_cast<uint64_t>(i);
  data.samples = 64;
  data.fields = {SyntheticField{"x", at::kFloat, {8, 8}, false, 0, 0, std::nullopt},
                 SyntheticField{"tokens", at::kInt, {}, true, 1, 20, std::pair{0.0, 9.0}}};
  PipelineOptions options;
  options.device = "cpu";
  options.batch_size = 16;
  options.prefetch = 2;
  options.decode_threads = 1 + static_cast<size_t>(i % 3);
  auto pipeline = std::make_unique<Pipeline>(make_pipeline(std::make_shared<const SyntheticSource>(data), options));
  switch (i % 4) {
    case 0: (void)pipeline->next(); pipeline->close(); break;  // closed mid-run
    case 1: while (pipeline->next()) {} break;                  // run out
    case 2: (void)pipeline->next(); break;                      // dropped mid-run, unclosed
    default: break;                                             // dropped before the first batch
  }
  if (rng() % 8 == 0) pipeline->close();
  pipeline.reset();
}

TEST(Leaks, AThousandPipelinesLeaveNoThreadDescriptorOrMemoryBehind) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100; ++i) cycle(i, rng);  // warm-up: allocator pools, oneTBB's workers, libtorch
  const size_t threads = entries("/proc/self/task");
  const size_t descriptors = entries("/proc/self/fd");
  const size_t resident = resident_bytes();
  for (int i = 100; i < 1100; ++i) {
    cycle(i, rng);
    ASSERT_EQ(PinnedPool::live_bytes(), 0u) << "staging memory outlived pipeline " << i;
  }
  const double grown_mib = (static_cast<double>(resident_bytes()) - static_cast<double>(resident)) / (1 << 20);
  std::cout << "[ measured ] 1000 pipelines: threads " << threads << " -> " << entries("/proc/self/task")
            << ", descriptors " << descriptors << " -> " << entries("/proc/self/fd") << ", resident memory "
            << (grown_mib >= 0 ? "+" : "") << grown_mib << " MiB\n";
  // oneTBB may still add workers up to its pool's size, once; a pipeline leaving one thread behind
  // would add a thousand.
  EXPECT_LT(entries("/proc/self/task"), threads + 20);
  EXPECT_EQ(entries("/proc/self/fd"), descriptors);
  // A pipeline's own memory is megabytes (staging, batches): leaking it would add gigabytes.
  if (kResidentMemoryMeansSomething) {
    EXPECT_LT(grown_mib, 64.0);
  }
}

}  // namespace
}  // namespace ferry
