// bench/latency: the per-batch cost of small batches. ferry beside a plain thread that moves the same
// bytes with nothing but a ring of pinned slabs, in one run on one machine.
//
//   latency [--device cuda|cpu] [--json PATH] [--batches N] [--prefetch N] [--decode-threads N]
//
// Cases (a batch is 32 samples of one field, made once in pageable memory):
//   tokens  32 x 2049 uint16 (131 KB: an LLM pretraining batch)
//   small   32 x 1 KiB uint8
// The plain loop: each batch's bytes (contiguous, pageable) are copied with one memcpy into the next
// of 4 pinned slabs, then one cudaMemcpyAsync on a non-blocking stream moves the slab to its device
// buffer and an event is recorded; a slab is reused once its event has completed. No decode, no
// framework: what the hardware allows one thread, not a design to copy. ferry runs its whole pipeline
// (sampler, decode, collate, pack, copy, event) on the same samples. Both report batches/s and the
// time per batch; ferry's is also given as a fraction of the plain loop's rate.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <oneapi/tbb/info.h>

#include <ferry/build_config.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/cuda_error.h>
#include <ferry/pipeline/cuda_stream.h>
#include <ferry/pipeline/device_guard.h>
#include <ferry/pipeline/malloc_name.h>
#include <ferry/stages/standard_pipeline.h>
#include "bench_args.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBatchSize = 32;
constexpr size_t kRing = 4;       // the plain loop's pinned slabs
constexpr size_t kVariants = 64;  // distinct premade samples, so that caches do not flatter either side

struct Case {
  std::string name;
  at::ScalarType dtype;
  int64_t elements;  // per sample
};

struct Result {
  Case shape;
  double plain_batches_per_s = 0;
  double ferry_batches_per_s = 0;
  ferry::PipelineStats stats;
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// kVariants samples of one field; reading one hands out the premade tensor itself, so the benchmark
// measures the pipeline, not data generation.
class PremadeSource : public ferry::Source {
 public:
  explicit PremadeSource(const Case& shape) {
    specs_.push_back(ferry::FieldSpec{"x", shape.dtype, {shape.elements}, std::nullopt, "raw"});
    for (size_t v = 0; v < kVariants; ++v) {
      samples_.push_back(at::randint(0, 100, {shape.elements}, at::TensorOptions().dtype(shape.dtype)));
    }
  }
  const std::vector<ferry::FieldSpec>& fields() const override { return specs_; }
  uint64_t size() const override { return 1'000'000'000; }
  ferry::EncodedSample read(uint64_t index) const override {
    return ferry::EncodedSample{index, {}, {samples_[index % kVariants]}};
  }
  std::string describe() const override { return "premade"; }

 private:
  std::vector<ferry::FieldSpec> specs_;
  std::vector<at::Tensor> samples_;
};

// The plain thread: `batches` batches of `bytes` from pageable memory through the ring to the device
// (or, on the CPU, into the ring only). Returns batches per second.
double plain_loop(const at::Device& device, size_t bytes, size_t batches) {
  std::vector<std::vector<std::byte>> pageable(kVariants / kBatchSize + 1, std::vector<std::byte>(bytes));
  for (auto& batch : pageable) std::memset(batch.data(), 7, bytes);
#if FERRY_HAVE_CUDART
  if (device.is_cuda()) {
    ferry::DeviceGuard guard(device.index());
    ferry::CudaStream stream(device.index());
    std::array<void*, kRing> slabs{};
    std::array<void*, kRing> targets{};
    std::array<cudaEvent_t, kRing> events{};
    for (size_t k = 0; k < kRing; ++k) {
      FERRY_CUDA_CHECK(cudaHostAlloc(&slabs[k], bytes, cudaHostAllocPortable));
      FERRY_CUDA_CHECK(cudaMalloc(&targets[k], bytes));
      FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&events[k], cudaEventDisableTiming));
    }
    auto one = [&](size_t i) {
      const size_t k = i % kRing;
      if (i >= kRing) FERRY_CUDA_CHECK(cudaEventSynchronize(events[k]));
      std::memcpy(slabs[k], pageable[i % pageable.size()].data(), bytes);
      FERRY_CUDA_CHECK(cudaMemcpyAsync(targets[k], slabs[k], bytes, cudaMemcpyHostToDevice, stream.handle()));
      FERRY_CUDA_CHECK(cudaEventRecord(events[k], stream.handle()));
    };
    for (size_t i = 0; i < 1000; ++i) one(i);  // warm-up
    FERRY_CUDA_CHECK(cudaStreamSynchronize(stream.handle()));
    const auto start = Clock::now();
    for (size_t i = 0; i < batches; ++i) one(i);
    FERRY_CUDA_CHECK(cudaStreamSynchronize(stream.handle()));
    const double rate = static_cast<double>(batches) / seconds_since(start);
    for (size_t k = 0; k < kRing; ++k) {
      FERRY_CUDA_CHECK(cudaEventDestroy(events[k]));
      FERRY_CUDA_CHECK(cudaFree(targets[k]));
      FERRY_CUDA_CHECK(cudaFreeHost(slabs[k]));
    }
    return rate;
  }
#endif
  std::vector<std::vector<std::byte>> ring(kRing, std::vector<std::byte>(bytes));
  const auto start = Clock::now();
  for (size_t i = 0; i < batches; ++i) std::memcpy(ring[i % kRing].data(), pageable[i % pageable.size()].data(), bytes);
  return static_cast<double>(batches) / seconds_since(start);
}

Result run_case(const Case& shape, const at::Device& device, size_t batches, size_t prefetch, size_t decode_threads,
                const std::string& trace) {
  Result result{shape, 0, 0, {}};
  const size_t bytes = kBatchSize * static_cast<size_t>(shape.elements) * at::elementSize(shape.dtype);
  result.plain_batches_per_s = plain_loop(device, bytes, batches);

  const size_t warmup = 500;
  ferry::PipelineOptions options;
  options.batch_size = kBatchSize;
  options.max_batches = warmup + batches;
  options.prefetch = prefetch;
  options.decode_threads = decode_threads;
  options.device = device.str();
  if (!trace.empty()) options.trace = bench::trace_file(trace, shape.name);
  ferry::Pipeline pipeline = ferry::make_pipeline(std::make_shared<PremadeSource>(shape), options);
  for (size_t i = 0; i < warmup; ++i) (void)pipeline.next();
  const auto start = Clock::now();
  size_t delivered = 0;
  while (auto batch = pipeline.next()) ++delivered;
  result.ferry_batches_per_s = static_cast<double>(delivered) / seconds_since(start);
  result.stats = pipeline.stats();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = ferry::cuda_device_count() > 0 ? "cuda:0" : "cpu";
  std::string json_path;
  size_t batches = 20000;
  size_t prefetch = 16;
  size_t decode_threads = std::min<size_t>(16, static_cast<size_t>(tbb::info::default_concurrency()));
  std::string trace;  // --trace PATH: each case's run as a Chrome trace, bench::trace_file()
  bench::BenchArgs("latency",
                   "latency [--device cuda|cpu] [--json PATH] [--batches N] [--prefetch N] [--decode-threads N] "
                   "[--trace PATH]")
      .value("--device", device_name)
      .value("--json", json_path)
      .value("--batches", batches)
      .value("--prefetch", prefetch)
      .value("--decode-threads", decode_threads)
      .value("--trace", trace)
      .parse(argc, argv);
  const at::Device device = ferry::resolve_device(device_name);
  const std::vector<Case> cases = {{"tokens 32 x 2049 uint16", at::kShort, 2049},
                                   {"small 32 x 1 KiB", at::kByte, 1024}};
  const std::string malloc_used = ferry::malloc_name();
  std::printf("bench/latency on %s (%s, malloc %s), %zu batches, prefetch %zu, %zu decode threads\n\n",
              device.str().c_str(), ferry::build_description().c_str(), malloc_used.c_str(), batches, prefetch,
              decode_threads);
  std::printf("%-26s %14s %12s %14s %12s %10s\n", "case", "plain batch/s", "plain us", "ferry batch/s", "ferry us",
              "of plain");
  std::vector<Result> results;
  for (const Case& shape : cases) {
    const Result r = run_case(shape, device, batches, prefetch, decode_threads, trace);
    std::printf("%-26s %14.0f %12.1f %14.0f %12.1f %9.1f%%\n", shape.name.c_str(), r.plain_batches_per_s,
                1e6 / r.plain_batches_per_s, r.ferry_batches_per_s, 1e6 / r.ferry_batches_per_s,
                100.0 * r.ferry_batches_per_s / r.plain_batches_per_s);
    // Where ferry's time went: each stage's busy time per batch (decode summed over its threads).
    std::printf("%-26s", "  ferry busy us/batch:");
    const double batches_done = static_cast<double>(std::max<uint64_t>(1, r.stats.batches));
    for (const ferry::StageStats& stage : r.stats.stages) {
      std::printf(" %s %.1f", stage.name.c_str(), 1e6 * stage.busy_seconds / batches_done);
    }
    std::printf(", consumer waited %.1f\n", 1e6 * r.stats.consumer_wait_seconds / batches_done);
    // And where a batch waited on its way (Note [batch path]).
    std::printf("  ferry batch path: %s\n", ferry::batch_path_summary(r.stats).c_str());
    results.push_back(r);
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\"benchmark\": \"latency\", \"device\": \"" << device.str() << "\", \"malloc\": \"" << malloc_used
        << "\", \"batches\": " << batches << ", \"prefetch\": " << prefetch
        << ", \"decode_threads\": " << decode_threads << ", \"cases\": [";
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      out << (i ? ", " : "") << "{\"name\": \"" << r.shape.name
          << "\", \"plain_batches_per_s\": " << r.plain_batches_per_s
          << ", \"ferry_batches_per_s\": " << r.ferry_batches_per_s << ", \"ferry_per_batch\": \""
          << ferry::per_batch_summary(r.stats) << "\", \"ferry_batch_path\": \"" << ferry::batch_path_summary(r.stats)
          << "\"}";
    }
    out << "]}\n";
    if (!out.flush()) {
      std::fprintf(stderr, "latency: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
