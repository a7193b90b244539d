// bench/jpeg_decode: how many JPEGs per second ferry's "jpeg" decoder turns into RGB pixels, on 1 to
// 16 threads, beside libjpeg-turbo's own ceiling, measured in one run on one machine.
//
//   jpeg_decode DIR [--max-threads N] [--seconds S] [--repeats R] [--limit N] [--json PATH]
//
// Every *.jpg / *.jpeg under DIR (recursively, in path order, at most --limit of them) is read into
// memory first, so no file system is timed. Then, for T in 1, 2, 4, 8, 16 (not above --max-threads,
// default: the hardware threads):
//   ferry   ferry::JpegDecoder::decode() of each image at its own size (no resize, no crop), as a
//           decode thread of the pipeline calls it: header check, a fresh output tensor per image.
//   plain   tjDecompress2() into a buffer allocated once per thread, with a TurboJPEG handle per
//           thread: nothing but the decompression. Its 1-thread rate is the baseline, the most one
//           core can do; its T-thread rate is what the machine allows T cores at once.
// T threads each decode every T-th image, round and round, for --seconds (default 0.5) after a
// warm-up; the rate is all images decoded / the time from a common start to the last thread's stop.
// Each point is measured --repeats times (default 5), plain and ferry alternating so that a busy
// neighbour or a clock change hits both alike; the table shows the median, the JSON every round.
// Scaling efficiency is rate(T) / (T x rate(1)) of the same decoder. Before timing, the first images
// are decoded both ways and compared byte for byte. Prints a table; writes JSON with --json.
//
// Where the build has nvJPEG and there is a GPU (unless --no-gpu): nvJPEG's hardware decoder as the
// pipeline uses it (ferry::detail::NvJpegDecoder, Note [GPU JPEG decode]), on the files it can decode,
// each at its own size into device memory, in batches of --gpu-batch (default 256): a decoder started in
// the background as `auto` starts it (ready once made and its first decoding state warmed) and its first
// batch, then one made as `gpu` makes it and its first batch asked for at once (Note [warming the
// decoding states]: it waits for the first decoding state), then the rate
// with 1, 2 and 4 callers decoding batches at once (at most NvJpegDecoder::kMaxWorkers at a time), with
// the CPU time per image it cost this process. The pipeline's own start-up and rates are in its report;
// this separates the hardware's part.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <latch>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include <ATen/ATen.h>
#include <turbojpeg.h>

#include <ferry/io/decoders/jpeg_decoder.h>
#include <ferry/io/decoders/jpeg_markers.h>
#include <ferry/io/decoders/nvjpeg_decoder.h>
#include <ferry/pipeline/cuda_device.h>
#include "bench_args.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Image {
  std::string path;
  at::Tensor bytes;  // the whole file, uint8
  ferry::FieldSpec spec;
  int width = 0;
  int height = 0;
};

struct Point {
  size_t threads = 0;
  double ferry_rate = 0;  // images/s, the median of the rounds
  double plain_rate = 0;
  std::vector<double> ferry_rounds;
  std::vector<double> plain_rounds;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string json_list(const std::vector<double>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

// A TurboJPEG decompressor owned by one thread.
class TjHandle {
 public:
  TjHandle() : handle_(tjInitDecompress()) {
    if (handle_ == nullptr) throw std::runtime_error(std::string("tjInitDecompress: ") + tjGetErrorStr2(nullptr));
  }
  ~TjHandle() { tjDestroy(handle_); }
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
  tjhandle get() const { return handle_; }

 private:
  tjhandle handle_;
};

void plain_decode(const TjHandle& handle, const Image& image, unsigned char* out) {
  if (tjDecompress2(handle.get(), image.bytes.data_ptr<uint8_t>(), static_cast<unsigned long>(image.bytes.numel()), out,
                    image.width, image.width * 3, image.height, TJPF_RGB, 0) != 0) {
    throw std::runtime_error(image.path + ": tjDecompress2: " + tjGetErrorStr2(handle.get()));
  }
}

std::vector<Image> load_images(const std::string& folder, size_t limit) {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(folder)) {
    if (!entry.is_regular_file()) continue;
    std::string extension = entry.path().extension().string();
    std::transform(extension.begin(), extension.end(), extension.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (extension == ".jpg" || extension == ".jpeg") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  if (limit != 0 && paths.size() > limit) paths.resize(limit);
  if (paths.empty()) throw std::runtime_error("no .jpg or .jpeg files under " + folder);

  TjHandle handle;
  std::vector<Image> images;
  images.reserve(paths.size());
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw std::runtime_error("cannot read " + path);
    const auto size = static_cast<int64_t>(in.tellg());
    Image image;
    image.path = path;
    image.bytes = at::empty({size}, at::kByte);
    in.seekg(0);
    if (!in.read(static_cast<char*>(image.bytes.data_ptr()), size)) throw std::runtime_error("cannot read " + path);
    int subsampling = 0, colorspace = 0;
    if (tjDecompressHeader3(handle.get(), image.bytes.data_ptr<uint8_t>(), static_cast<unsigned long>(size),
                            &image.width, &image.height, &subsampling, &colorspace) != 0) {
      throw std::runtime_error(path + ": " + tjGetErrorStr2(handle.get()));
    }
    image.spec = ferry::FieldSpec{"image", at::kByte, {image.height, image.width, 3}, std::nullopt, "jpeg"};
    images.push_back(std::move(image));
  }
  return images;
}

// Runs decode(thread, image) on `threads` threads, each taking every threads-th image from its own
// offset, round and round, for `seconds` after a short warm-up; returns images per second.
double timed_rate(size_t threads, double seconds, size_t image_count,
                  const std::function<std::function<void(size_t)>(size_t)>& make_worker) {
  std::latch ready(static_cast<std::ptrdiff_t>(threads));  // each thread, once warm
  std::atomic<bool> go{false};
  std::atomic<int64_t> deadline_ns{0};
  std::vector<size_t> counts(threads, 0);
  std::vector<Clock::time_point> stops(threads);
  std::vector<std::exception_ptr> errors(threads);
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      bool counted_down = false;
      try {
        const std::function<void(size_t)> decode = make_worker(t);  // per-thread state: handle, buffer
        const size_t warmup = std::min<size_t>(image_count, 8);
        for (size_t i = 0; i < warmup; ++i) decode((t + i * threads) % image_count);
        counted_down = true;
        ready.count_down();
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        const Clock::time_point deadline{Clock::duration(deadline_ns.load())};
        size_t count = 0;
        size_t index = t % image_count;
        do {
          decode(index);
          ++count;
          index = (index + threads) % image_count;
        } while (Clock::now() < deadline);
        counts[t] = count;
        stops[t] = Clock::now();
      } catch (...) {
        errors[t] = std::current_exception();
        if (!counted_down)
          ready.count_down();  // the others still start, stop at the deadline, and the error is rethrown
      }
    });
  }
  ready.wait();
  const Clock::time_point start = Clock::now();
  deadline_ns.store(
      std::chrono::duration_cast<Clock::duration>(start.time_since_epoch() + std::chrono::duration<double>(seconds))
          .count());
  go.store(true, std::memory_order_release);
  for (std::thread& thread : pool) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  size_t total = 0;
  Clock::time_point last = start;
  for (size_t t = 0; t < threads; ++t) {
    total += counts[t];
    last = std::max(last, stops[t]);
  }
  return static_cast<double>(total) / std::chrono::duration<double>(last - start).count();
}

// This process's user + system CPU seconds so far.
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double milliseconds_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// What measure_nvjpeg() found; `why` says why it did not run.
struct GpuResult {
  std::string why;
  size_t decodable = 0;  // files the hardware takes
  size_t batch = 0;
  double create_ms = 0, first_batch_ms = 0;
  // NvJpegDecoder::Start::kInBackground, as `auto` starts it: until ready (made, its first decoding state
  // warmed), then its first batch.
  double background_ready_ms = 0, first_batch_after_warm_ms = 0;
  struct Rate {
    size_t callers = 0;
    double images_per_second = 0;
    double cpu_ms_per_image = 0;  // this process's user + system time over the images
  };
  std::vector<Rate> rates;
};

GpuResult measure_nvjpeg(const std::vector<Image>& images, double seconds, size_t batch) {
  GpuResult result;
  result.batch = batch;
  if (std::string why = ferry::detail::NvJpegDecoder::unavailable_reason(); !why.empty()) {
    result.why = why;
    return result;
  }
  if (ferry::cuda_device_count() == 0) {
    result.why = ferry::cuda_unavailable_reason();
    return result;
  }
  // The background start first, while the device is fresh to this process.
  std::optional<ferry::detail::NvJpegDecoder> warmed;
  const Clock::time_point starting = Clock::now();
  warmed.emplace(0, ferry::detail::NvJpegDecoder::Start::kInBackground);
  while (!warmed->ready()) {
    if (std::string why = warmed->failure(); !why.empty()) {
      result.why = why;
      return result;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  result.background_ready_ms = milliseconds_since(starting);
  std::vector<const Image*> usable;
  size_t max_pixels = 0;
  for (const Image& image : images) {
    const auto* data = image.bytes.data_ptr<uint8_t>();
    const auto size = static_cast<size_t>(image.bytes.numel());
    if (!ferry::detail::jpeg_segments_complete(data, size) || !warmed->supported(data, size)) continue;
    usable.push_back(&image);
    max_pixels = std::max(max_pixels, static_cast<size_t>(image.width) * static_cast<size_t>(image.height));
  }
  result.decodable = usable.size();
  if (usable.empty()) {
    result.why = "the hardware decodes none of these files";
    return result;
  }
  // Batch b: `batch` consecutive decodable files from b * batch on (wrapping), each into its own place
  // in the caller's device buffer.
  const size_t batches = std::max<size_t>(1, usable.size() / batch);
  auto decode_batch_with = [&](ferry::detail::NvJpegDecoder& decoder, uint8_t* out, size_t b) {
    std::vector<ferry::detail::GpuJpegImage> list(batch);
    size_t offset = 0;
    for (size_t k = 0; k < batch; ++k) {
      const Image& image = *usable[(b * batch + k) % usable.size()];
      ferry::detail::GpuJpegImage& g = list[k];
      g.data = image.bytes.data_ptr<uint8_t>();
      g.size = static_cast<size_t>(image.bytes.numel());
      g.width = image.width;
      g.height = image.height;
      // The whole image at its own size: each axis [0, size) resampled to size pixels, all kept.
      const int64_t h = image.height, w = image.width;
      g.window.height = h;
      g.window.width = w;
      g.window.rows = ferry::detail::AxisWindow{0.0, static_cast<double>(h), h, 0, h};
      g.window.columns = ferry::detail::AxisWindow{0.0, static_cast<double>(w), w, 0, w};
      g.out = out + offset;
      offset += static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3;
    }
    const std::vector<std::string> errors = decoder.decode(list);
    for (size_t k = 0; k < errors.size(); ++k) {
      if (!errors[k].empty())
        throw std::runtime_error(usable[(b * batch + k) % usable.size()]->path + ": " + errors[k]);
    }
  };
  const auto buffer_bytes = static_cast<int64_t>(batch * max_pixels * 3);
  auto device_buffer = [&] {
    return at::empty({buffer_bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, 0));
  };
  at::Tensor first = device_buffer();
  const Clock::time_point warm_started = Clock::now();
  decode_batch_with(*warmed, first.data_ptr<uint8_t>(), 0);
  result.first_batch_after_warm_ms = milliseconds_since(warm_started);
  warmed.reset();
  // Then one made as `gpu` makes it, alone: the handle in the constructor (the process's second, which
  // nvJPEG may make faster than the first), the decoding states warmed in the background, the first batch
  // asked for at once (it waits for the first warm state).
  const Clock::time_point made = Clock::now();
  ferry::detail::NvJpegDecoder nvjpeg(0);
  result.create_ms = milliseconds_since(made);
  auto decode_batch = [&](uint8_t* out, size_t b) { decode_batch_with(nvjpeg, out, b); };
  const Clock::time_point started = Clock::now();
  decode_batch(first.data_ptr<uint8_t>(), 0);
  result.first_batch_ms = milliseconds_since(started);
  // The rates with every decoding state warm (a state that failed to warm is made by a call instead).
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  while (nvjpeg.room() < ferry::detail::NvJpegDecoder::kMaxWorkers && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (const size_t callers : {1, 2, 4}) {
    auto worker = [&](size_t) -> std::function<void(size_t)> {
      auto out = std::make_shared<at::Tensor>(device_buffer());
      return [&, out](size_t b) { decode_batch(out->data_ptr<uint8_t>(), b); };
    };
    const double cpu_before = cpu_seconds();
    const Clock::time_point began = Clock::now();
    GpuResult::Rate rate;
    rate.callers = callers;
    rate.images_per_second = timed_rate(callers, seconds, batches, worker) * static_cast<double>(batch);
    // Over the whole call (warm-up included), the images it decoded: rate x wall time, near enough.
    const double wall = std::chrono::duration<double>(Clock::now() - began).count();
    rate.cpu_ms_per_image = 1e3 * (cpu_seconds() - cpu_before) / (rate.images_per_second * wall);
    result.rates.push_back(rate);
  }
  return result;
}

// The decoders must agree before their speeds are compared.
void check_same_pixels(const std::vector<Image>& images, const ferry::JpegDecoder& decoder, size_t count) {
  TjHandle handle;
  for (size_t i = 0; i < std::min(count, images.size()); ++i) {
    const Image& image = images[i];
    const at::Tensor ferry_pixels = decoder.decode(image.bytes, image.spec);
    std::vector<unsigned char> plain(static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3);
    plain_decode(handle, image, plain.data());
    if (ferry_pixels.numel() != static_cast<int64_t>(plain.size()) ||
        std::memcmp(ferry_pixels.data_ptr(), plain.data(), plain.size()) != 0) {
      throw std::runtime_error(image.path + ": ferry's JpegDecoder and tjDecompress2 give different pixels");
    }
  }
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  std::string folder;
  std::string json_path;
  size_t max_threads = std::max(1u, std::thread::hardware_concurrency());
  double seconds = 0.5;
  size_t repeats = 5;
  size_t limit = 0;
  size_t gpu_batch = 256;
  bool no_gpu = false;
  bench::BenchArgs args("jpeg_decode",
                        "jpeg_decode DIR [--max-threads N] [--seconds S] [--repeats R] [--limit N] [--json PATH] "
                        "[--gpu-batch N] [--no-gpu]");
  args.value("--max-threads", max_threads)
      .value("--gpu-batch", gpu_batch)
      .flag("--no-gpu", no_gpu)
      .value("--seconds", seconds)
      .value("--repeats", repeats)
      .value("--limit", limit)
      .value("--json", json_path)
      .positional(folder)
      .parse(argc, argv);
  if (folder.empty()) args.fail("a folder of JPEGs is needed");
  if (max_threads == 0 || !(seconds > 0) || repeats == 0 || gpu_batch == 0) {
    args.fail("--max-threads, --seconds, --repeats and --gpu-batch must be above 0");
  }
  try {
    const std::vector<Image> images = load_images(folder, limit);
    size_t max_pixels = 0;
    double total_bytes = 0;
    int min_w = images[0].width, max_w = min_w, min_h = images[0].height, max_h = min_h;
    for (const Image& image : images) {
      max_pixels = std::max(max_pixels, static_cast<size_t>(image.width) * static_cast<size_t>(image.height));
      total_bytes += static_cast<double>(image.bytes.numel());
      min_w = std::min(min_w, image.width), max_w = std::max(max_w, image.width);
      min_h = std::min(min_h, image.height), max_h = std::max(max_h, image.height);
    }
    const double mean_kb = total_bytes / static_cast<double>(images.size()) / 1e3;
    const std::string sizes = min_w == max_w && min_h == max_h
                                  ? std::to_string(max_w) + "x" + std::to_string(max_h)
                                  : std::to_string(min_w) + ".." + std::to_string(max_w) + " x " +
                                        std::to_string(min_h) + ".." + std::to_string(max_h);

    const ferry::JpegDecoder decoder;  // the built-in "jpeg": the file's own size
    check_same_pixels(images, decoder, 64);

    auto ferry_worker = [&](size_t) -> std::function<void(size_t)> {
      return [&](size_t i) { (void)decoder.decode(images[i].bytes, images[i].spec); };
    };
    auto plain_worker = [&](size_t) -> std::function<void(size_t)> {
      auto handle = std::make_shared<TjHandle>();
      auto buffer = std::make_shared<std::vector<unsigned char>>(max_pixels * 3);
      return [&, handle, buffer](size_t i) { plain_decode(*handle, images[i], buffer->data()); };
    };

    // One untimed round first: the first timed round ran slower than later ones on an H100 host
    // (caches, clocks), which made the 1-thread baseline look low and scaling look above 100%.
    (void)timed_rate(1, seconds, images.size(), plain_worker);
    std::vector<Point> points;
    for (const size_t threads : {1, 2, 4, 8, 16}) {
      if (threads > max_threads) break;
      Point point;
      point.threads = threads;
      for (size_t round = 0; round < repeats; ++round) {
        point.plain_rounds.push_back(timed_rate(threads, seconds, images.size(), plain_worker));
        point.ferry_rounds.push_back(timed_rate(threads, seconds, images.size(), ferry_worker));
      }
      point.plain_rate = median(point.plain_rounds);
      point.ferry_rate = median(point.ferry_rounds);
      std::fprintf(stderr, "jpeg_decode: %zu thread%s done\n", threads, threads == 1 ? "" : "s");
      points.push_back(point);
    }
    const double ferry_one = points[0].ferry_rate;
    const double plain_one = points[0].plain_rate;

    std::printf(
        "\nferry JPEG decode benchmark: %zu JPEGs from %s, %s, mean %.1f kB, in memory; %u hardware threads; "
        "median of %zu rounds of %.2f s per point\n",
        images.size(), folder.c_str(), sizes.c_str(), mean_kb, std::thread::hardware_concurrency(), repeats, seconds);
    std::printf(
        "baseline: plain tjDecompress2 into a preallocated buffer, 1 thread: %.0f images/s (%.3f ms per image)\n",
        plain_one, 1e3 / plain_one);
    std::printf("%7s %12s %11s %9s %13s %11s %9s %10s\n", "threads", "ferry img/s", "per thread", "scaling",
                "plain img/s", "per thread", "scaling", "ferry/base");
    for (const Point& p : points) {
      const auto t = static_cast<double>(p.threads);
      std::printf("%7zu %12.0f %11.0f %8.0f%% %13.0f %11.0f %8.0f%% %9.0f%%\n", p.threads, p.ferry_rate,
                  p.ferry_rate / t, 100.0 * p.ferry_rate / (t * ferry_one), p.plain_rate, p.plain_rate / t,
                  100.0 * p.plain_rate / (t * plain_one), 100.0 * p.ferry_rate / (t * plain_one));
    }
    std::printf(
        "(scaling: rate / (threads x the same decoder's 1-thread rate); ferry/base: ferry per thread as a share\n"
        " of the baseline, plain tjDecompress2 on 1 thread)\n");

    GpuResult gpu;
    gpu.why = "--no-gpu";
    if (!no_gpu) gpu = measure_nvjpeg(images, seconds * static_cast<double>(repeats), gpu_batch);
    if (!gpu.why.empty()) {
      std::printf("\nnvJPEG: not measured: %s\n", gpu.why.c_str());
    } else {
      std::printf(
          "\nnvJPEG hardware decoder on cuda:0, %zu of the %zu files (those it decodes), batches of %zu, each "
          "image at its own size:\n  made in %.1f ms; first batch %.1f ms later (waiting for its first decoding "
          "state)\n"
          "  started in the background as `auto` does (made, its first decoding state warmed): ready after %.1f "
          "ms; first batch then %.1f ms\n",
          gpu.decodable, images.size(), gpu.batch, gpu.create_ms, gpu.first_batch_ms, gpu.background_ready_ms,
          gpu.first_batch_after_warm_ms);
      for (const GpuResult::Rate& rate : gpu.rates) {
        std::printf("  %zu caller%s at once: %.0f images/s, %.3f ms CPU an image\n", rate.callers,
                    rate.callers == 1 ? "" : "s", rate.images_per_second, rate.cpu_ms_per_image);
      }
    }

    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << "{\n  \"benchmark\": \"jpeg_decode\",\n  \"folder\": " << json_string(folder)
          << ",\n  \"images\": " << images.size() << ",\n  \"size\": " << json_string(sizes)
          << ",\n  \"mean_bytes\": " << total_bytes / static_cast<double>(images.size())
          << ",\n  \"hardware_threads\": " << std::thread::hardware_concurrency()
          << ",\n  \"seconds_per_round\": " << seconds << ",\n  \"rounds\": " << repeats
          << ",\n  \"baseline\": \"plain tjDecompress2 into a preallocated buffer, 1 thread\""
          << ",\n  \"baseline_images_per_second\": " << plain_one << ",\n  \"points\": [\n";
      for (size_t i = 0; i < points.size(); ++i) {
        const Point& p = points[i];
        const auto t = static_cast<double>(p.threads);
        out << "    {\"threads\": " << p.threads << ", \"ferry_images_per_second\": " << p.ferry_rate
            << ", \"ferry_per_thread\": " << p.ferry_rate / t
            << ", \"ferry_scaling_efficiency\": " << p.ferry_rate / (t * ferry_one)
            << ", \"plain_images_per_second\": " << p.plain_rate << ", \"plain_per_thread\": " << p.plain_rate / t
            << ", \"plain_scaling_efficiency\": " << p.plain_rate / (t * plain_one)
            << ", \"ferry_per_thread_of_baseline\": " << p.ferry_rate / (t * plain_one)
            << ", \"ferry_rounds\": " << json_list(p.ferry_rounds)
            << ", \"plain_rounds\": " << json_list(p.plain_rounds) << "}" << (i + 1 < points.size() ? "," : "") << "\n";
      }
      out << "  ],\n  \"nvjpeg\": {\"measured\": " << (gpu.why.empty() ? "true" : "false")
          << ", \"why_not\": " << json_string(gpu.why) << ", \"decodable_files\": " << gpu.decodable
          << ", \"batch\": " << gpu.batch << ", \"create_ms\": " << gpu.create_ms
          << ", \"first_batch_ms\": " << gpu.first_batch_ms << ", \"background_ready_ms\": " << gpu.background_ready_ms
          << ", \"first_batch_after_warm_ms\": " << gpu.first_batch_after_warm_ms << ", \"rates\": [";
      for (size_t i = 0; i < gpu.rates.size(); ++i) {
        out << (i ? ", " : "") << "{\"callers\": " << gpu.rates[i].callers
            << ", \"images_per_second\": " << gpu.rates[i].images_per_second
            << ", \"cpu_ms_per_image\": " << gpu.rates[i].cpu_ms_per_image << "}";
      }
      out << "]}\n}\n";
      if (!out.flush()) throw std::runtime_error("cannot write " + json_path);
      std::printf("wrote %s\n", json_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jpeg_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
