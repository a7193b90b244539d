#include "ferry/io/decoders/nvjpeg_decoder.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "ferry/build_config.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/thread_start.h"

#if FERRY_NVJPEG
#include <cuda_runtime_api.h>
#include <nvjpeg.h>

#include <ATen/ops/arange.h>

#include "ferry/io/decoders/image_resize_kernel.h"
#include "ferry/io/decoders/jpeg_encoder.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/device_guard.h"
#endif

namespace ferry::detail {
namespace {

uint64_t steady_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace

#if FERRY_NVJPEG

namespace {

const char* status_text(nvjpegStatus_t status) {
  switch (status) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "no hardware decoder on this GPU (arch mismatch)";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    default: return "unknown nvJPEG status";
  }
}

std::string failed(const char* call, nvjpegStatus_t status) {
  return std::string("nvJPEG: ") + call + " failed: " + status_text(status) + " (" +
         std::to_string(static_cast<int>(status)) + ")";
}

#define FERRY_NVJPEG_CHECK(call)                                                                       \
  do {                                                                                                 \
    const nvjpegStatus_t ferry_nvjpeg_status = (call);                                                 \
    if (ferry_nvjpeg_status != NVJPEG_STATUS_SUCCESS) throw Error(failed(#call, ferry_nvjpeg_status)); \
  } while (false)

// Whether a window is the whole decoded image, unresized: the decoder can then write it in place.
bool in_place(const GpuJpegImage& image) {
  return image.window.height == image.height && image.window.width == image.width && whole_image(image.window);
}

}  // namespace

// The library handle, and the pool of workers idle between decode() calls.
// Parsed-stream objects for supported() are pooled too: nvjpegJpegStreamCreate allocates, and every
// GPU-routed image is asked about, from every decode thread at once.
struct NvJpegDecoder::Library {
  nvjpegHandle_t handle = nullptr;
  std::mutex mutex;
  std::condition_variable returned;           // a worker went back to idle
  std::vector<std::unique_ptr<Worker>> idle;  // guarded by mutex
  size_t workers = 0;                         // made so far, at most kMaxWorkers; guarded by mutex
  std::vector<nvjpegJpegStream_t> streams;    // guarded by mutex
  size_t in_hardware = 0;                     // decode() calls between acquire and their wait; guarded by mutex
  uint64_t busy_since_ns = 0;                 // when in_hardware last became 1; guarded by mutex
  uint64_t changed_ns = 0;                    // when in_hardware last changed; guarded by mutex
  std::string failure;                        // why a background start failed; guarded by mutex

  nvjpegJpegStream_t take_stream() {
    {
      std::lock_guard lock(mutex);
      if (!streams.empty()) {
        nvjpegJpegStream_t stream = streams.back();
        streams.pop_back();
        return stream;
      }
    }
    nvjpegJpegStream_t stream = nullptr;
    return nvjpegJpegStreamCreate(handle, &stream) == NVJPEG_STATUS_SUCCESS ? stream : nullptr;
  }
  void give_stream(nvjpegJpegStream_t stream) {
    std::lock_guard lock(mutex);
    streams.push_back(stream);
  }
};

// What one decode() call uses alone: a decoding state, a stream, and scratch device memory for images
// that are resized afterwards (grown as needed, never shrunk).
struct NvJpegDecoder::Worker {
  nvjpegHandle_t handle = nullptr;
  nvjpegJpegState_t state = nullptr;
  cudaStream_t stream = nullptr;
  // Waited on with cudaEventBlockingSync: cudaStreamSynchronize spins on its core for the whole decode
  // (the runtime's default while there are fewer contexts than cores), a core the CPU decoders want.
  cudaEvent_t done = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;

  Worker(nvjpegHandle_t library, int device) : handle(library) {
    DeviceGuard guard(device);
    FERRY_NVJPEG_CHECK(nvjpegJpegStateCreate(handle, &state));
    try {
      FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventBlockingSync | cudaEventDisableTiming));
    } catch (...) {  // a constructor that throws runs no destructor
      if (stream != nullptr) (void)cudaStreamDestroy(stream);
      (void)nvjpegJpegStateDestroy(state);
      throw;
    }
  }
  ~Worker() {
    if (scratch != nullptr) (void)cudaFree(scratch);
    if (done != nullptr) (void)cudaEventDestroy(done);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
    if (state != nullptr) (void)nvjpegJpegStateDestroy(state);
  }
  // Until the work queued on the stream so far has finished, the thread asleep.
  void wait() {
    FERRY_CUDA_CHECK(cudaEventRecord(done, stream));
    FERRY_CUDA_CHECK(cudaEventSynchronize(done));
  }
  void* scratch_of(size_t bytes) {
    if (bytes <= scratch_bytes) return scratch;
    if (scratch != nullptr) FERRY_CUDA_CHECK(cudaFree(scratch));
    scratch = nullptr;
    scratch_bytes = 0;
    FERRY_CUDA_CHECK(cudaMalloc(&scratch, bytes));
    scratch_bytes = bytes;
    return scratch;
  }
  // Decodes images [first, first + count) of `data` into `outputs` in one batched call.
  nvjpegStatus_t decode(const std::vector<const unsigned char*>& data, const std::vector<size_t>& lengths,
                        std::vector<nvjpegImage_t>& outputs, size_t first, size_t count) {
    nvjpegStatus_t status =
        nvjpegDecodeBatchedInitialize(handle, state, static_cast<int>(count), 1, NVJPEG_OUTPUT_RGBI);
    if (status != NVJPEG_STATUS_SUCCESS) return status;
    return nvjpegDecodeBatched(handle, state, data.data() + first, lengths.data() + first, outputs.data() + first,
                               stream);
  }
};

NvJpegDecoder::NvJpegDecoder(int device, Start start)
    : device_(device), library_(std::make_unique<Library>()), made_ns_(steady_ns()) {
  if (start == Start::kNow) {
    create();  // throws here where the device has no hardware decoder
    made_.store(true, std::memory_order_release);
  }
  // Every decoding state is warmed on the start-up thread (warm()); counted as made from now on, so that
  // a decode() call waits for a warm one instead of making a cold one beside it.
  library_->workers = kMaxWorkers;
  try {
    starter_ = detail::start_thread("the GPU JPEG decoder's start-up thread", [this, start] {
      try {
        if (!made_.load(std::memory_order_acquire)) {
          create();
          made_.store(true, std::memory_order_release);
        }
        warm();  // ready with its first warm state
      } catch (const std::exception& e) {
        // A state that fails to warm is left to decode() calls, which make it cold and report what goes
        // wrong with it there. Only a background start that never got ready has failed as a whole.
        std::lock_guard lock(library_->mutex);
        if (start == Start::kInBackground && !ready()) library_->failure = cause_of(e);
      }
    });
  } catch (...) {  // a constructor that throws runs no destructor
    if (library_->handle != nullptr) (void)nvjpegDestroy(library_->handle);
    throw;
  }
}

void NvJpegDecoder::create() {
  DeviceGuard guard(device_);
  const nvjpegStatus_t status = nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &library_->handle);
  if (status != NVJPEG_STATUS_SUCCESS) {
    library_->handle = nullptr;
    throw Error("decoding JPEGs on cuda:" + std::to_string(device_) +
                " needs nvJPEG's hardware decoder (A100, H100 and newer): " + failed("nvjpegCreateEx", status) +
                "; use the jpeg decoder's device: cpu");
  }
}

// Note [warming the decoding states]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// nvJPEG's hardware decoder is slow to start, and not in the decoding: on an H200 nvjpegCreateEx took
// 275 ms, the first decoding state (nvjpegJpegStateCreate) 340-360 ms and each further one 100-130 ms,
// while a batch of 256 then decodes in 5-10 ms. States made at once are made one after another inside
// nvJPEG all the same: four of them, each by the first decode() call of a batch's groups, were ready
// after 0.36, 0.47, 0.58 and 0.71 s, and the first batch, which needs all its groups, came after the
// last. So all states are made here, on the start-up thread, one after another, each warmed with a first
// decode: the decoder is ready with the first, decode() calls share it until the next is warm, and no
// call makes a cold one meanwhile. Under `gpu` the handle is made in the constructor (which reports a
// device without the hardware) and the states are warmed while the rest of the pipeline starts.
void NvJpegDecoder::warm() {
  size_t unmade = kMaxWorkers;  // reserved in the constructor
  // However this ends (all warm, a failure, the destructor), the states not made are no longer
  // reserved: decode() calls waiting for one make them (cold) after all.
  struct Unreserve {
    Library& library;
    const size_t& unmade;
    ~Unreserve() {
      if (unmade == 0) return;
      {
        std::lock_guard lock(library.mutex);
        library.workers -= unmade;
      }
      library.returned.notify_all();
    }
  } unreserve{*library_, unmade};
  constexpr int64_t kSide = 256;
  constexpr size_t kImages = 64;
  // A gradient, so that the file has real coefficients to decode.
  const at::Tensor ramp = at::arange(kSide * kSide * 3, at::kInt).remainder(251).to(at::kByte);
  const at::Tensor jpeg = JpegEncoder().encode(ramp.view({kSide, kSide, 3}));
  const auto window_bytes = static_cast<size_t>((kSide - 1) * (kSide - 1) * 3);
  std::vector<GpuJpegImage> images(kImages);
  DeviceGuard guard(device_);
  struct Output {
    void* memory = nullptr;
    ~Output() { (void)cudaFree(memory); }
  } output;
  FERRY_CUDA_CHECK(cudaMalloc(&output.memory, window_bytes * kImages));
  for (size_t k = 0; k < kImages; ++k) {
    GpuJpegImage& image = images[k];
    image.data = jpeg.data_ptr<uint8_t>();
    image.size = static_cast<size_t>(jpeg.numel());
    image.width = image.height = static_cast<int>(kSide);
    image.window.height = image.window.width = kSide;  // resized: the scratch path too
    image.window.rows = image.window.columns = AxisWindow{0.0, static_cast<double>(kSide), kSide - 1, 0, kSide - 1};
    image.out = static_cast<uint8_t*>(output.memory) + k * window_bytes;
  }
  for (; unmade > 0 && !stopping_.load(std::memory_order_acquire); --unmade) {
    auto worker = std::make_unique<Worker>(library_->handle, device_);
    for (const std::string& error : decode_on(*worker, images)) {
      if (!error.empty()) throw Error("warming nvJPEG up: " + error);
    }
    release(std::move(worker));
    if (warm_workers_.load(std::memory_order_relaxed) == 0)
      ready_ns_.store(steady_ns() - made_ns_, std::memory_order_relaxed);
    warm_workers_.fetch_add(1, std::memory_order_acq_rel);  // ready() with the first
  }
}

NvJpegDecoder::~NvJpegDecoder() {
  stopping_.store(true, std::memory_order_release);
  if (starter_.joinable()) starter_.join();
  DeviceGuard guard(device_);
  library_->idle.clear();
  for (nvjpegJpegStream_t stream : library_->streams) (void)nvjpegJpegStreamDestroy(stream);
  if (library_->handle != nullptr) (void)nvjpegDestroy(library_->handle);
}

std::string NvJpegDecoder::unavailable_reason() { return ""; }

std::unique_ptr<NvJpegDecoder::Worker> NvJpegDecoder::acquire() {
  {
    std::unique_lock lock(library_->mutex);
    // At most kMaxWorkers decode at once; a call beyond them waits for one to come back. Each call
    // holds its worker only while it decodes, never while it waits for anything else, so a wait ends.
    library_->returned.wait(lock, [&] { return !library_->idle.empty() || library_->workers < kMaxWorkers; });
    if (!library_->idle.empty()) {
      std::unique_ptr<Worker> worker = std::move(library_->idle.back());
      library_->idle.pop_back();
      return worker;
    }
    ++library_->workers;
  }
  try {
    return std::make_unique<Worker>(library_->handle, device_);  // CUDA calls outside the lock
  } catch (...) {
    std::lock_guard lock(library_->mutex);
    --library_->workers;
    library_->returned.notify_one();
    throw;
  }
}

void NvJpegDecoder::release(std::unique_ptr<Worker> worker) {
  {
    std::lock_guard lock(library_->mutex);
    library_->idle.push_back(std::move(worker));
  }
  library_->returned.notify_one();
}

bool NvJpegDecoder::supported(const uint8_t* data, size_t size) const {
  if (!made_.load(std::memory_order_acquire)) return false;
  nvjpegJpegStream_t stream = library_->take_stream();
  if (stream == nullptr) return false;
  int answer = -1;
  if (nvjpegJpegStreamParseHeader(library_->handle, data, size, stream) == NVJPEG_STATUS_SUCCESS) {
    if (nvjpegDecodeBatchedSupported(library_->handle, stream, &answer) != NVJPEG_STATUS_SUCCESS) answer = -1;
  }
  library_->give_stream(stream);
  return answer == 0;  // nvJPEG says 0 for "supported"
}

std::string NvJpegDecoder::failure() const {
  std::lock_guard lock(library_->mutex);
  return library_->failure;
}

void NvJpegDecoder::mark_busy(bool starting) noexcept {
  std::lock_guard lock(library_->mutex);
  Library& l = *library_;
  const uint64_t now = steady_ns();
  // The states in use, integrated over time.
  state_busy_ns_.fetch_add(l.in_hardware * (now - l.changed_ns), std::memory_order_relaxed);
  l.changed_ns = now;
  if (starting) {
    if (l.in_hardware++ == 0) l.busy_since_ns = now;
  } else if (--l.in_hardware == 0) {
    busy_ns_.fetch_add(now - l.busy_since_ns, std::memory_order_relaxed);
  }
}

std::vector<std::string> NvJpegDecoder::decode(std::span<const GpuJpegImage> images) {
  if (images.empty()) return {};
  if (!made_.load(std::memory_order_acquire)) {
    const std::string why = failure();
    throw Error("nvJPEG's decoder on cuda:" + std::to_string(device_) + " is not ready" +
                (why.empty() ? std::string(": it is still starting") : ": " + why));
  }
  DeviceGuard guard(device_);
  std::unique_ptr<Worker> worker = acquire();
  struct Return {  // the worker goes back to the pool however this call ends
    NvJpegDecoder& decoder;
    std::unique_ptr<Worker>& worker;
    ~Return() {
      if (worker) decoder.release(std::move(worker));
    }
  } give_back{*this, worker};
  mark_busy(true);
  struct Leave {
    NvJpegDecoder& decoder;
    ~Leave() { decoder.mark_busy(false); }
  } leave{*this};
  return decode_on(*worker, images);
}

std::vector<std::string> NvJpegDecoder::decode_on(Worker& worker, std::span<const GpuJpegImage> images) {
  std::vector<std::string> errors(images.size());
  // Where each image is decoded: in place, or at its offset in the scratch memory.
  std::vector<size_t> offsets(images.size(), 0);
  size_t scratch = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    if (in_place(images[i])) continue;
    offsets[i] = scratch;
    scratch +=
        (size_t{3} * static_cast<size_t>(images[i].width) * static_cast<size_t>(images[i].height) + 255) / 256 * 256;
  }
  // The resize jobs' tap tables, made on the host as the CPU path makes them (image_resample.cpp says
  // why), go to the device in one copy, after the decoded images in the scratch memory.
  std::vector<ResizeJob> jobs(images.size());
  std::vector<int32_t> tables;
  struct Placed {
    size_t rows[3] = {}, columns[3] = {};  // offsets of first, count and weights in `tables`
  };
  std::vector<Placed> placed(images.size());
  const auto append = [&](const ResampleTaps& taps, size_t(&at)[3]) {
    at[0] = tables.size();
    tables.insert(tables.end(), taps.first.begin(), taps.first.end());
    at[1] = tables.size();
    tables.insert(tables.end(), taps.count.begin(), taps.count.end());
    at[2] = tables.size();
    tables.insert(tables.end(), taps.weights.begin(), taps.weights.end());
  };
  for (size_t i = 0; i < images.size(); ++i) {
    if (in_place(images[i])) continue;
    const GpuJpegImage& image = images[i];
    ImageDecodeOptions filter;
    filter.interpolation = image.interpolation;
    filter.antialias = image.antialias;
    const WindowTaps taps = window_taps(image.window, image.height, image.width, filter);
    append(taps.rows, placed[i].rows);
    append(taps.columns, placed[i].columns);
    ResizeJob& job = jobs[i];
    job.out = image.out;
    job.width = image.width;
    job.out_w = static_cast<int32_t>(image.window.out_w());
    job.out_h = static_cast<int32_t>(image.window.out_h());
    job.flip = image.window.flip ? 1 : 0;
    job.rows.max_taps = taps.rows.max_taps;
    job.columns.max_taps = taps.columns.max_taps;
  }
  const size_t table_bytes = tables.size() * sizeof(int32_t);
  auto* base = static_cast<unsigned char*>(scratch != 0 ? worker.scratch_of(scratch + table_bytes) : nullptr);
  if (table_bytes != 0) {
    const auto* device_tables = reinterpret_cast<const int32_t*>(base + scratch);
    FERRY_CUDA_CHECK(
        cudaMemcpyAsync(base + scratch, tables.data(), table_bytes, cudaMemcpyHostToDevice, worker.stream));
    for (size_t i = 0; i < images.size(); ++i) {
      if (in_place(images[i])) continue;
      jobs[i].source = base + offsets[i];
      jobs[i].rows = {device_tables + placed[i].rows[0], device_tables + placed[i].rows[1],
                      device_tables + placed[i].rows[2], jobs[i].rows.max_taps};
      jobs[i].columns = {device_tables + placed[i].columns[0], device_tables + placed[i].columns[1],
                         device_tables + placed[i].columns[2], jobs[i].columns.max_taps};
    }
  }
  std::vector<const unsigned char*> data(images.size());
  std::vector<size_t> lengths(images.size());
  std::vector<nvjpegImage_t> outputs(images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    data[i] = images[i].data;
    lengths[i] = images[i].size;
    outputs[i] = nvjpegImage_t{};
    outputs[i].channel[0] = in_place(images[i]) ? images[i].out : base + offsets[i];
    outputs[i].pitch[0] = static_cast<size_t>(images[i].width) * 3;
  }

  // One batched call; if it fails, one call per image, so that only the damaged ones fail.
  std::vector<bool> decoded(images.size(), true);
  if (worker.decode(data, lengths, outputs, 0, images.size()) != NVJPEG_STATUS_SUCCESS) {
    worker.wait();
    for (size_t i = 0; i < images.size(); ++i) {
      const nvjpegStatus_t status = worker.decode(data, lengths, outputs, i, 1);
      if (status != NVJPEG_STATUS_SUCCESS) {
        errors[i] = failed("nvjpegDecodeBatched", status);
        decoded[i] = false;
      }
      // A failed call may leave work queued on the stream: wait before the next image reuses the state.
      worker.wait();
    }
  }
  // Only the images that decoded are resized; the tables' copy is ahead of the kernel on the stream.
  size_t kept = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    if (decoded[i] && !in_place(images[i])) jobs[kept++] = jobs[i];
  }
  jobs.resize(kept);
  for (size_t first = 0; first < jobs.size(); first += kResizeJobsPerLaunch) {
    launch_resize_kernel(jobs.data() + first, std::min(kResizeJobsPerLaunch, jobs.size() - first), worker.stream);
  }
  // The scratch memory is reused by the next call and the outputs are read on other streams: wait here.
  worker.wait();
  return errors;
}

#else  // no nvJPEG in this build

struct NvJpegDecoder::Library {};
struct NvJpegDecoder::Worker {};

NvJpegDecoder::NvJpegDecoder(int device, Start /*start*/) : device_(device), made_ns_(steady_ns()) {
  throw Error("decoding JPEGs on the GPU needs a ferry build with nvJPEG: " + unavailable_reason() +
              "; use the jpeg decoder's device: cpu");
}

NvJpegDecoder::~NvJpegDecoder() = default;

std::string NvJpegDecoder::unavailable_reason() { return FERRY_NVJPEG_REASON; }

std::string NvJpegDecoder::failure() const { return unavailable_reason(); }

void NvJpegDecoder::create() {}

void NvJpegDecoder::warm() {}

void NvJpegDecoder::mark_busy(bool /*starting*/) noexcept {}

std::unique_ptr<NvJpegDecoder::Worker> NvJpegDecoder::acquire() { return nullptr; }

void NvJpegDecoder::release(std::unique_ptr<Worker> /*worker*/) {}

bool NvJpegDecoder::supported(const uint8_t* /*data*/, size_t /*size*/) const { return false; }

std::vector<std::string> NvJpegDecoder::decode(std::span<const GpuJpegImage> images) {
  return std::vector<std::string>(images.size(), "this build has no nvJPEG: " + unavailable_reason());
}

std::vector<std::string> NvJpegDecoder::decode_on(Worker& /*worker*/, std::span<const GpuJpegImage> images) {
  return decode(images);
}

#endif

double NvJpegDecoder::ready_seconds() const noexcept {
  return ready() ? static_cast<double>(ready_ns_.load(std::memory_order_relaxed)) * 1e-9 : 0.0;
}

size_t NvJpegDecoder::room() const noexcept { return warm_workers_.load(std::memory_order_acquire); }

double NvJpegDecoder::busy_seconds() const noexcept {
  return static_cast<double>(busy_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

double NvJpegDecoder::state_busy_seconds() const noexcept {
  return static_cast<double>(state_busy_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

}  // namespace ferry::detail
