// bench/transfer: how fast ferry delivers batches of many tensors to the GPU, beside the link's own
// limit and libtorch's per-tensor copies, all measured in one run on one machine.
//
//   transfer [--device cuda|cpu] [--json PATH] [--batches N] [--prefetch N] [--decode-threads N] [--trace PATH]
//            [--cases abcd] [--no-plain-loops] [--quick]
//
// Cases (a batch is one sample whose fields are the tensors; pageable float32 tensors made once):
//   a) 4 x 16 MiB   b) 1000 x 4 KiB   c) 1000 x 64 KiB   d) 10000 x 1 KiB
// and, on a GPU, (a) again from tensors that already live in pinned memory (copied in place).
// For each: ferry's delivered bandwidth (batch bytes / time between batches arriving ready on the
// device, after a warm-up), and libtorch's `tensor.to(device, /*non_blocking=*/true)` on each tensor
// of the same batches followed by a stream sync per batch. The link limit is a pinned
// cudaMemcpyAsync of one large buffer. With case (a) on a GPU, plain loops staging the same pageable
// batches show what staging can deliver on this host: packed in windows, each copied as soon as it is
// packed (window_gbps; one window of the whole batch is ferry's order), and through a small ring of
// pinned chunks per thread (ring_gbps). --no-plain-loops skips them.
// Prints a table; writes JSON with --json.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>

#include <ferry/build_config.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/cuda_error.h>
#include <ferry/pipeline/cuda_event.h>
#include <ferry/pipeline/cuda_stream.h>
#include <ferry/pipeline/device_guard.h>
#include <ferry/pipeline/malloc_name.h>
#include <ferry/pipeline/pinned_pool.h>
#include <ferry/stages/parallel_copy.h>
#include <ferry/stages/standard_pipeline.h>
#include "bench_args.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;
constexpr size_t kSourceBatches = 4;  // the plain loops' batches come in turn from this many

struct Case {
  std::string name;
  size_t tensors;
  size_t bytes_each;
  bool pinned = false;  // the source's tensors live in pinned memory (ferry copies them in place)
};

struct Result {
  Case shape;
  double ferry_gbps = 0;
  double torch_gbps = 0;
  ferry::PipelineStats stats;
  double drop_us = 0;  // the consumer dropping a delivered batch, per batch
};

// `variants` samples of `tensors` float32 fields each, made once in pageable memory; reading one
// hands out the tensors themselves, so the benchmark measures transfer, not data generation.
class PremadeSource : public ferry::Source {
 public:
  PremadeSource(const Case& shape, size_t variants) {
    const int64_t floats = static_cast<int64_t>(shape.bytes_each / sizeof(float));
    for (size_t t = 0; t < shape.tensors; ++t) {
      specs_.push_back(
          ferry::FieldSpec{std::string("t").append(std::to_string(t)), at::kFloat, {floats}, std::nullopt, "raw"});
    }
    for (size_t v = 0; v < variants; ++v) {
      std::vector<at::Tensor> sample;
      for (size_t t = 0; t < shape.tensors; ++t) {
        at::Tensor tensor = at::rand({floats});
        sample.push_back(shape.pinned ? tensor.pin_memory() : tensor);
      }
      samples_.push_back(std::move(sample));
    }
  }
  const std::vector<ferry::FieldSpec>& fields() const override { return specs_; }
  uint64_t size() const override { return 1'000'000; }
  ferry::EncodedSample read(uint64_t index) const override {
    return ferry::EncodedSample{index, "premade:" + std::to_string(index), samples_[index % samples_.size()]};
  }
  std::string describe() const override { return "premade"; }
  const std::vector<at::Tensor>& sample(size_t v) const { return samples_[v % samples_.size()]; }

 private:
  std::vector<ferry::FieldSpec> specs_;
  std::vector<std::vector<at::Tensor>> samples_;
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// What pack alone achieves: pageable tensors copied into a staging slab by every thread, with no
// copy engine competing for memory. The delivered bandwidth of large batches can exceed neither
// this nor the link.
double pack_gbps(const at::Device& device, size_t bytes) {
  ferry::PinnedPoolOptions options;
  options.slab_bytes = bytes;
  options.slab_count = 1;
  options.pinned = device.is_cuda();
  options.device = device.is_cuda() ? device.index() : 0;
  auto pool = ferry::PinnedPool::create(options);
  auto slab = pool->try_acquire();
  std::vector<at::Tensor> sources;
  for (int v = 0; v < 4; ++v) sources.push_back(at::rand({static_cast<int64_t>(bytes / sizeof(float))}));
  auto copy_once = [&](const at::Tensor& source) {
    ferry::run_copies({ferry::CopyOp{slab->data(), static_cast<const std::byte*>(source.data_ptr()), bytes, {}, 1}}, 1);
  };
  copy_once(sources[0]);
  const int repeats = 20;
  const auto start = Clock::now();
  for (int r = 0; r < repeats; ++r) copy_once(sources[static_cast<size_t>(r) % sources.size()]);
  return static_cast<double>(bytes) * repeats / seconds_since(start) / 1e9;
}

// The link's limit: one large pinned buffer copied host-to-device, timed with events.
double raw_link_gbps(int device, size_t bytes, int repeats) {
#if FERRY_HAVE_CUDART
  ferry::DeviceGuard guard(device);
  void* host = nullptr;
  void* target = nullptr;
  FERRY_CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocPortable));
  std::memset(host, 1, bytes);
  FERRY_CUDA_CHECK(cudaMalloc(&target, bytes));
  ferry::CudaStream stream(device);
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  FERRY_CUDA_CHECK(cudaEventCreate(&start));
  FERRY_CUDA_CHECK(cudaEventCreate(&stop));
  FERRY_CUDA_CHECK(cudaMemcpyAsync(target, host, bytes, cudaMemcpyHostToDevice, stream.handle()));  // warm-up
  FERRY_CUDA_CHECK(cudaEventRecord(start, stream.handle()));
  for (int r = 0; r < repeats; ++r) {
    FERRY_CUDA_CHECK(cudaMemcpyAsync(target, host, bytes, cudaMemcpyHostToDevice, stream.handle()));
  }
  FERRY_CUDA_CHECK(cudaEventRecord(stop, stream.handle()));
  FERRY_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  FERRY_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  FERRY_CUDA_CHECK(cudaEventDestroy(start));
  FERRY_CUDA_CHECK(cudaEventDestroy(stop));
  FERRY_CUDA_CHECK(cudaFree(target));
  FERRY_CUDA_CHECK(cudaFreeHost(host));
  return static_cast<double>(bytes) * repeats / (ms * 1e-3) / 1e9;
#else
  (void)device, (void)bytes, (void)repeats;
  return 0;
#endif
}

// The plain loops' batches: kSourceBatches pageable batches of `bytes`, taken in turn (one alone
// could stay in the cache), and the device buffer they are copied to. Made once for all the loops.
class PlainLoopBatches {
 public:
  PlainLoopBatches(int device, size_t bytes) : device_(device), bytes_(bytes), sources_(kSourceBatches * bytes) {
    std::memset(sources_.data(), 1, sources_.size());
#if FERRY_HAVE_CUDART
    ferry::DeviceGuard guard(device);
    FERRY_CUDA_CHECK(cudaMalloc(&target_, bytes));
#endif
  }
  ~PlainLoopBatches() {
#if FERRY_HAVE_CUDART
    if (target_ != nullptr) (void)cudaFree(target_);
#endif
  }
  PlainLoopBatches(const PlainLoopBatches&) = delete;
  PlainLoopBatches& operator=(const PlainLoopBatches&) = delete;

  int device() const { return device_; }
  size_t bytes() const { return bytes_; }
  const std::byte* source(int batch) const {
    return sources_.data() + static_cast<size_t>(batch) % kSourceBatches * bytes_;
  }
  std::byte* target() const { return static_cast<std::byte*>(target_); }

 private:
  int device_;
  size_t bytes_;
  std::vector<std::byte> sources_;
  void* target_ = nullptr;
};

// What staging through a small ring could reach (docs/benchmarks.md, "What staging can deliver for
// (a)"): a plain loop, no framework. `threads` threads share each pageable batch;
// thread t copies chunks t, t + threads, ... of `chunk` bytes into its own ring of `slots`
// pinned buffers, each followed at once by a cudaMemcpyAsync on the thread's stream and an event that
// frees the slot. The ring (threads x slots x chunk) is small enough to stay in the last-level cache,
// so the copy engine may read the bytes from there instead of host memory.
double ring_gbps(const PlainLoopBatches& batch, int repeats, int threads, size_t chunk, int slots) {
#if FERRY_HAVE_CUDART
  const int device = batch.device();
  const size_t bytes = batch.bytes();
  ferry::DeviceGuard guard(device);
  struct Ring {  // one thread's: made before the clock starts (pinning is slow)
    void* slots = nullptr;
    std::unique_ptr<ferry::CudaStream> stream;
    std::vector<cudaEvent_t> freed;
    size_t used = 0;
  };
  std::vector<Ring> rings(static_cast<size_t>(threads));
  for (Ring& ring : rings) {
    FERRY_CUDA_CHECK(cudaHostAlloc(&ring.slots, chunk * static_cast<size_t>(slots), cudaHostAllocPortable));
    ring.stream = std::make_unique<ferry::CudaStream>(device);
    ring.freed.resize(static_cast<size_t>(slots));
    for (cudaEvent_t& event : ring.freed) FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  const size_t chunks = (bytes + chunk - 1) / chunk;
  auto one_thread = [&](size_t t, int batches) {
    ferry::DeviceGuard on(device);
    Ring& ring = rings[t];
    for (int b = 0; b < batches; ++b) {
      const std::byte* source = batch.source(b);
      for (size_t c = t; c < chunks; c += rings.size(), ++ring.used) {
        const size_t slot = ring.used % ring.freed.size();
        if (ring.used >= ring.freed.size()) FERRY_CUDA_CHECK(cudaEventSynchronize(ring.freed[slot]));
        std::byte* staging = static_cast<std::byte*>(ring.slots) + slot * chunk;
        const size_t offset = c * chunk;
        const size_t length = std::min(chunk, bytes - offset);
        std::memcpy(staging, source + offset, length);
        FERRY_CUDA_CHECK(
            cudaMemcpyAsync(batch.target() + offset, staging, length, cudaMemcpyHostToDevice, ring.stream->handle()));
        FERRY_CUDA_CHECK(cudaEventRecord(ring.freed[slot], ring.stream->handle()));
      }
    }
    FERRY_CUDA_CHECK(cudaStreamSynchronize(ring.stream->handle()));
  };
  auto run = [&](int batches) {
    std::vector<std::thread> workers;
    for (size_t t = 0; t < rings.size(); ++t) workers.emplace_back(one_thread, t, batches);
    for (std::thread& worker : workers) worker.join();
  };
  run(1);  // warm-up: the source's pages and the slots touched
  const auto start = Clock::now();
  run(repeats);
  const double seconds = seconds_since(start);
  for (Ring& ring : rings) {
    for (cudaEvent_t event : ring.freed) FERRY_CUDA_CHECK(cudaEventDestroy(event));
    FERRY_CUDA_CHECK(cudaFreeHost(ring.slots));
  }
  return static_cast<double>(bytes) * repeats / seconds / 1e9;
#else
  (void)batch, (void)repeats, (void)threads, (void)chunk, (void)slots;
  return 0;
#endif
}

// The same batch staged as ferry's pack and h2d do, in a plain loop: every thread copies its share of
// a window of `window` bytes into a pinned slab, then one cudaMemcpyAsync sends the window, while the
// threads go on with the next one. A window of the whole batch is today's order (the whole batch packed, then
// copied); smaller windows let the copy of a window start while the next one is packed. Two slabs
// alternate between batches.
double window_gbps(const PlainLoopBatches& batches, int repeats, size_t window, bool ferry_copies) {
#if FERRY_HAVE_CUDART
  const size_t bytes = batches.bytes();
  ferry::DeviceGuard guard(batches.device());
  void* slabs[2] = {nullptr, nullptr};
  cudaEvent_t copied[2] = {nullptr, nullptr};
  for (int s = 0; s < 2; ++s) {
    FERRY_CUDA_CHECK(cudaHostAlloc(&slabs[s], bytes, cudaHostAllocPortable));
    FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&copied[s], cudaEventDisableTiming));
  }
  ferry::CudaStream stream(batches.device());
  const size_t piece = size_t{256} << 10;
  auto batch = [&](int b) {
    const int s = b % 2;
    if (b >= 2) FERRY_CUDA_CHECK(cudaEventSynchronize(copied[s]));
    auto* slab = static_cast<std::byte*>(slabs[s]);
    const std::byte* source = batches.source(b);
    for (size_t offset = 0; offset < bytes; offset += window) {
      const size_t length = std::min(window, bytes - offset);
      if (ferry_copies) {  // pack's own copies (non-temporal stores for large pieces)
        ferry::run_copies({ferry::CopyOp{slab + offset, source + offset, length, {}, 1}}, piece);
      } else {  // ordinary stores: the window may still be in the cache when the copy engine reads it
        tbb::parallel_for(size_t{0}, (length + piece - 1) / piece, [&](size_t p) {
          const size_t at = p * piece;
          std::memcpy(slab + offset + at, source + offset + at, std::min(piece, length - at));
        });
      }
      FERRY_CUDA_CHECK(
          cudaMemcpyAsync(batches.target() + offset, slab + offset, length, cudaMemcpyHostToDevice, stream.handle()));
    }
    FERRY_CUDA_CHECK(cudaEventRecord(copied[s], stream.handle()));
  };
  batch(0);
  batch(1);
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream.handle()));
  const auto start = Clock::now();
  for (int b = 0; b < repeats; ++b) batch(b);
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream.handle()));
  const double seconds = seconds_since(start);
  for (int s = 0; s < 2; ++s) {
    FERRY_CUDA_CHECK(cudaEventDestroy(copied[s]));
    FERRY_CUDA_CHECK(cudaFreeHost(slabs[s]));
  }
  return static_cast<double>(bytes) * repeats / seconds / 1e9;
#else
  (void)batches, (void)repeats, (void)window, (void)ferry_copies;
  return 0;
#endif
}

void synchronize(const at::Device& device) {
#if FERRY_HAVE_CUDART
  if (device.is_cuda()) FERRY_CUDA_CHECK(cudaDeviceSynchronize());
#else
  (void)device;
#endif
}

Result run_case(const Case& shape, const at::Device& device, size_t batches, size_t warmup, size_t prefetch,
                size_t decode_threads, const std::string& trace) {
  auto source = std::make_shared<PremadeSource>(shape, 4);
  const double batch_bytes = static_cast<double>(shape.tensors * shape.bytes_each);
  Result result{shape, 0, 0, {}};

  ferry::PipelineOptions options;
  options.batch_size = 1;
  options.max_batches = warmup + batches;
  options.prefetch = prefetch;
  options.decode_threads = decode_threads;
  options.device = device.str();
  if (!trace.empty()) options.trace = bench::trace_file(trace, shape.name);
  ferry::Pipeline pipeline = ferry::make_pipeline(source, options);
  for (size_t i = 0; i < warmup; ++i) (void)pipeline.next();
  const auto start = Clock::now();
  size_t delivered = 0;
  double dropping = 0;  // the consumer's own part of a batch's cost: its tensors freed
  while (true) {
    auto batch = pipeline.next();
    if (!batch) break;
    ++delivered;
    const auto drop_start = Clock::now();
    batch.reset();
    dropping += seconds_since(drop_start);
  }
  result.ferry_gbps = batch_bytes * static_cast<double>(delivered) / seconds_since(start) / 1e9;
  result.drop_us = delivered == 0 ? 0 : dropping / static_cast<double>(delivered) * 1e6;
  result.stats = pipeline.stats();

  // libtorch, tensor by tensor, as a training loop without a loader would do it.
  for (size_t i = 0; i < warmup; ++i) {
    for (const at::Tensor& tensor : source->sample(i)) (void)tensor.to(device, /*non_blocking=*/true);
    synchronize(device);
  }
  const auto torch_start = Clock::now();
  for (size_t i = 0; i < batches; ++i) {
    std::vector<at::Tensor> copies;
    copies.reserve(shape.tensors);
    for (const at::Tensor& tensor : source->sample(i)) {
      copies.push_back(device.is_cuda() ? tensor.to(device, /*non_blocking=*/true) : tensor.clone());
    }
    synchronize(device);
  }
  result.torch_gbps = batch_bytes * static_cast<double>(batches) / seconds_since(torch_start) / 1e9;
  return result;
}

// " (82% of link)", or nothing without a link figure (a CPU run).
std::string of_link(double gbps, double link) {
  return link > 0 ? " (" + std::to_string(static_cast<int>(100.0 * gbps / link + 0.5)) + "% of link)" : "";
}

std::string size_text(size_t bytes) {
  return bytes >= kMiB ? std::to_string(bytes / kMiB) + " MiB" : std::to_string(bytes / kKiB) + " KiB";
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = ferry::gpu_build() && ferry::cuda_device_count() > 0 ? "cuda" : "cpu";
  std::string json_path;
  size_t batches = 0;
  size_t prefetch = 3;
  size_t decode_threads = 0;
  std::string trace;  // --trace PATH: each case's run as a Chrome trace, bench::trace_file()
  std::string only;   // case letters to run, e.g. "bd"; empty: every case
  bool quick = false;
  bool no_plain_loops = false;
  bench::BenchArgs("transfer",
                   "transfer [--device cuda|cpu] [--json PATH] [--batches N] [--prefetch N] [--decode-threads N] "
                   "[--trace PATH] [--cases abcd] [--no-plain-loops] [--quick]")
      .value("--device", device_name)
      .value("--json", json_path)
      .value("--batches", batches)
      .value("--prefetch", prefetch)
      .value("--decode-threads", decode_threads)
      .value("--trace", trace)
      .value("--cases", only)
      .flag("--no-plain-loops", no_plain_loops)
      .flag("--quick", quick)
      .parse(argc, argv);
  try {
    const at::Device device = ferry::resolve_device(device_name);
    std::vector<Case> cases = {{"a) 4 x 16 MiB", 4, 16 * kMiB},
                               {"b) 1000 x 4 KiB", 1000, 4 * kKiB},
                               {"c) 1000 x 64 KiB", 1000, 64 * kKiB},
                               {"d) 10000 x 1 KiB", 10000, 1 * kKiB}};
    if (device.is_cuda()) cases.push_back({"a) pinned source", 4, 16 * kMiB, true});
    if (quick) cases = {{"a) 4 x 1 MiB", 4, kMiB}, {"b) 100 x 4 KiB", 100, 4 * kKiB}};
    if (!only.empty()) {
      const auto unwanted = [&](const Case& c) { return only.find(c.name.front()) == std::string::npos; };
      cases.erase(std::remove_if(cases.begin(), cases.end(), unwanted), cases.end());
      if (cases.empty()) throw std::runtime_error("--cases " + only + " names none of the cases a, b, c, d");
    }

    std::string gpu = "none";
    double link = 0;
    if (device.is_cuda()) {
#if FERRY_HAVE_CUDART
      cudaDeviceProp properties{};
      FERRY_CUDA_CHECK(cudaGetDeviceProperties(&properties, device.index()));
      gpu = properties.name;
#endif
      link = raw_link_gbps(device.index(), quick ? 64 * kMiB : 1024 * kMiB, quick ? 3 : 10);
    }
    const double pack = pack_gbps(device, quick ? 4 * kMiB : 64 * kMiB);
    struct RingResult {
      int threads;
      size_t chunk;
      int slots;
      double gbps;
    };
    std::vector<RingResult> rings;
    struct WindowResult {
      size_t window;
      bool ferry_copies;
      double gbps;
    };
    std::vector<WindowResult> windows;
    const bool has_a = std::any_of(cases.begin(), cases.end(), [](const Case& c) { return c.name.front() == 'a'; });
    if (device.is_cuda() && has_a && !no_plain_loops) {
      const PlainLoopBatches plain(device.index(), quick ? 16 * kMiB : 64 * kMiB);
      const int repeats = quick ? 3 : 20;
      for (bool ferry_copies : {true, false}) {
        for (size_t window : {64 * kMiB, 16 * kMiB, 4 * kMiB, 1 * kMiB}) {
          const size_t bytes = std::min(window, plain.bytes());
          windows.push_back({bytes, ferry_copies, window_gbps(plain, repeats, bytes, ferry_copies)});
        }
      }
      for (int threads : {4, 8, 16}) {
        for (size_t chunk : {256 * kKiB, 1 * kMiB, 4 * kMiB}) {
          const int slots = 3;
          rings.push_back({threads, chunk, slots, ring_gbps(plain, repeats, threads, chunk, slots)});
        }
      }
    }
    std::vector<Result> results;
    for (const Case& shape : cases) {
      const size_t batch_bytes = shape.tensors * shape.bytes_each;
      const size_t count =
          batches != 0 ? batches : std::clamp<size_t>((quick ? 64 : 4096) * kMiB / batch_bytes, 10, 200);
      results.push_back(run_case(shape, device, count, quick ? 2 : 5, prefetch, decode_threads, trace));
      std::fprintf(stderr, "transfer: %s done\n", shape.name.c_str());
    }

    const std::string malloc_used = ferry::malloc_name();
    std::printf("\nferry transfer benchmark on %s (%s, %d hardware threads), %s, malloc %s\n", device.str().c_str(),
                gpu.c_str(), tbb::info::default_concurrency(), ferry::build_description().c_str(), malloc_used.c_str());
    if (link > 0)
      std::printf("link limit: pinned cudaMemcpyAsync of %s: %.1f GB/s\n", quick ? "64 MiB" : "1 GiB", link);
    std::printf("pack alone: %s of pageable tensors into a %s slab by %d threads: %.1f GB/s\n",
                quick ? "4 MiB" : "64 MiB", device.is_cuda() ? "pinned" : "pageable", tbb::info::default_concurrency(),
                pack);
    if (!windows.empty()) {
      std::printf(
          "staged in windows, a plain loop (all threads pack a window of the batch into a pinned slab, "
          "then one copy of it):\n");
      for (const WindowResult& w : windows) {
        std::printf("  window %-8s %-26s %6.1f GB/s%s\n", size_text(w.window).c_str(),
                    w.ferry_copies ? "pack's copies" : "memcpy (ordinary stores)", w.gbps,
                    of_link(w.gbps, link).c_str());
      }
    }
    if (!rings.empty()) {
      std::printf(
          "staged ring, a plain loop of %s pageable batches (threads x slots of chunk, pinned, each chunk "
          "copied as soon as it is staged):\n",
          quick ? "16 MiB" : "64 MiB");
      for (const RingResult& r : rings) {
        std::printf("  %2d threads x %d x %-8s %6.1f GB/s%s\n", r.threads, r.slots, size_text(r.chunk).c_str(), r.gbps,
                    of_link(r.gbps, link).c_str());
      }
    }
    std::printf("settings: prefetch %zu\n", prefetch);
    std::printf("%-20s %10s %12s %14s %9s %11s\n", "case", "batch", "ferry GB/s", "torch .to GB/s", "speedup",
                "% of link");
    for (const Result& r : results) {
      std::printf("%-20s %10s %12.2f %14.3f %8.1fx %10.1f%%\n", r.shape.name.c_str(),
                  size_text(r.shape.tensors * r.shape.bytes_each).c_str(), r.ferry_gbps, r.torch_gbps,
                  r.ferry_gbps / r.torch_gbps, link > 0 ? 100.0 * r.ferry_gbps / link : 0.0);
    }
    std::printf("\nferry per-stage busy time (seconds, whole run incl. warm-up):\n");
    for (const Result& r : results) {
      std::printf("  %-20s", r.shape.name.c_str());
      for (const ferry::StageStats& stage : r.stats.stages)
        std::printf(" %s %.3f", stage.name.c_str(), stage.busy_seconds);
      std::printf("  (consumer waited %.3f s; dropping a batch took it %.1f us)\n", r.stats.consumer_wait_seconds,
                  r.drop_us);
      std::printf("  %-20s pool: %zu slabs of %s, %llu waits for a slab (%.3f s)\n", "", r.stats.pool.slab_count,
                  size_text(r.stats.pool.slab_bytes).c_str(), static_cast<unsigned long long>(r.stats.pool.waits),
                  r.stats.pool.wait_seconds);
      std::printf("  %-20s batch path: %s\n", "", ferry::batch_path_summary(r.stats).c_str());
    }

    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << "{\n  \"benchmark\": \"transfer\",\n  \"device\": \"" << device.str() << "\",\n  \"gpu\": \"" << gpu
          << "\",\n  \"build\": \"" << ferry::build_description() << "\",\n  \"malloc\": \"" << malloc_used
          << "\",\n  \"torch\": \"" << FERRY_TORCH_VERSION
          << "\",\n  \"hardware_threads\": " << tbb::info::default_concurrency() << ",\n  \"prefetch\": " << prefetch
          << ",\n  \"link_gbps\": " << link << ",\n  \"pack_alone_gbps\": " << pack << ",\n  \"staged_ring\": [";
      for (size_t i = 0; i < rings.size(); ++i) {
        out << (i == 0 ? "\n" : ",\n") << "    {\"threads\": " << rings[i].threads
            << ", \"chunk_bytes\": " << rings[i].chunk << ", \"slots\": " << rings[i].slots
            << ", \"gbps\": " << rings[i].gbps << "}";
      }
      out << (rings.empty() ? "" : "\n  ") << "],\n  \"staged_in_windows\": [";
      for (size_t i = 0; i < windows.size(); ++i) {
        out << (i == 0 ? "\n" : ",\n") << "    {\"window_bytes\": " << windows[i].window
            << ", \"pack_copies\": " << (windows[i].ferry_copies ? "true" : "false")
            << ", \"gbps\": " << windows[i].gbps << "}";
      }
      out << (windows.empty() ? "" : "\n  ") << "],\n  \"cases\": [\n";
      for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        out << "    {\"case\": \"" << r.shape.name << "\", \"tensors\": " << r.shape.tensors
            << ", \"bytes_each\": " << r.shape.bytes_each << ", \"ferry_gbps\": " << r.ferry_gbps
            << ", \"torch_per_tensor_gbps\": " << r.torch_gbps << ", \"speedup\": " << r.ferry_gbps / r.torch_gbps
            << ", \"fraction_of_link\": " << (link > 0 ? r.ferry_gbps / link : 0.0)
            << ", \"decode_threads\": " << r.stats.decode_threads << ", \"drop_us\": " << r.drop_us
            << ", \"pool_slabs\": " << r.stats.pool.slab_count << ", \"pool_waits\": " << r.stats.pool.waits
            << ", \"pool_wait_seconds\": " << r.stats.pool.wait_seconds << "}" << (i + 1 < results.size() ? "," : "")
            << "\n";
      }
      out << "  ]\n}\n";
      std::printf("wrote %s\n", json_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transfer: %s\n", e.what());
    return 1;
  }
  return 0;
}
