#include "ferry/io/decoders/nvjpeg_decoder.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "ferry/build_config.h"
#include "ferry/pipeline/error.h"

#if FERRY_NVJPEG
#include <cuda_runtime_api.h>
#include <nvjpeg.h>

#include "ferry/io/decoders/image_resize_kernel.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/device_guard.h"
#endif

namespace ferry::detail {

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
  const ImageWindow& w = image.window;
  return image.shrink == 1 && w.resized_h == image.height && w.resized_w == image.width && w.top == 0 && w.left == 0 &&
         w.out_h == image.height && w.out_w == image.width;
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
  void* scratch = nullptr;
  size_t scratch_bytes = 0;

  Worker(nvjpegHandle_t library, int device) : handle(library) {
    DeviceGuard guard(device);
    FERRY_NVJPEG_CHECK(nvjpegJpegStateCreate(handle, &state));
    try {
      FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    } catch (...) {  // a constructor that throws runs no destructor
      (void)nvjpegJpegStateDestroy(state);
      throw;
    }
  }
  ~Worker() {
    if (scratch != nullptr) (void)cudaFree(scratch);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
    if (state != nullptr) (void)nvjpegJpegStateDestroy(state);
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

NvJpegDecoder::NvJpegDecoder(int device) : device_(device), library_(std::make_unique<Library>()) {
  DeviceGuard guard(device_);
  const nvjpegStatus_t status = nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &library_->handle);
  if (status != NVJPEG_STATUS_SUCCESS) {
    throw Error("decoding JPEGs on cuda:" + std::to_string(device_) +
                " needs nvJPEG's hardware decoder (A100, H100 and newer): " + failed("nvjpegCreateEx", status) +
                "; use the jpeg decoder's device: cpu");
  }
}

NvJpegDecoder::~NvJpegDecoder() {
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
  nvjpegJpegStream_t stream = library_->take_stream();
  if (stream == nullptr) return false;
  int answer = -1;
  if (nvjpegJpegStreamParseHeader(library_->handle, data, size, stream) == NVJPEG_STATUS_SUCCESS) {
    if (nvjpegDecodeBatchedSupported(library_->handle, stream, &answer) != NVJPEG_STATUS_SUCCESS) answer = -1;
  }
  library_->give_stream(stream);
  return answer == 0;  // nvJPEG says 0 for "supported"
}

std::vector<std::string> NvJpegDecoder::decode(std::span<const GpuJpegImage> images) {
  std::vector<std::string> errors(images.size());
  if (images.empty()) return errors;
  DeviceGuard guard(device_);
  std::unique_ptr<Worker> worker = acquire();
  struct Return {  // the worker goes back to the pool however this call ends
    NvJpegDecoder& decoder;
    std::unique_ptr<Worker>& worker;
    ~Return() {
      if (worker) decoder.release(std::move(worker));
    }
  } give_back{*this, worker};

  // Where each image is decoded: in place, or at its offset in the scratch memory.
  std::vector<size_t> offsets(images.size(), 0);
  size_t scratch = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    if (in_place(images[i])) continue;
    offsets[i] = scratch;
    scratch +=
        (size_t{3} * static_cast<size_t>(images[i].width) * static_cast<size_t>(images[i].height) + 255) / 256 * 256;
  }
  auto* base = static_cast<unsigned char*>(scratch != 0 ? worker->scratch_of(scratch) : nullptr);
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
  if (worker->decode(data, lengths, outputs, 0, images.size()) != NVJPEG_STATUS_SUCCESS) {
    FERRY_CUDA_CHECK(cudaStreamSynchronize(worker->stream));
    for (size_t i = 0; i < images.size(); ++i) {
      const nvjpegStatus_t status = worker->decode(data, lengths, outputs, i, 1);
      if (status != NVJPEG_STATUS_SUCCESS) {
        errors[i] = failed("nvjpegDecodeBatched", status);
        decoded[i] = false;
      }
      // A failed call may leave work queued on the stream: wait before the next image reuses the state.
      FERRY_CUDA_CHECK(cudaStreamSynchronize(worker->stream));
    }
  }

  std::vector<ResizeJob> jobs;
  for (size_t i = 0; i < images.size(); ++i) {
    if (!decoded[i] || in_place(images[i])) continue;
    const GpuJpegImage& image = images[i];
    ResizeJob job;
    job.source = base + offsets[i];
    job.out = image.out;
    job.width = image.width;
    job.height = image.height;
    job.shrink = image.shrink;
    job.resized_w = static_cast<int32_t>(image.window.resized_w);
    job.resized_h = static_cast<int32_t>(image.window.resized_h);
    job.top = static_cast<int32_t>(image.window.top);
    job.left = static_cast<int32_t>(image.window.left);
    job.out_w = static_cast<int32_t>(image.window.out_w);
    job.out_h = static_cast<int32_t>(image.window.out_h);
    jobs.push_back(job);
  }
  for (size_t first = 0; first < jobs.size(); first += kResizeJobsPerLaunch) {
    launch_resize_kernel(jobs.data() + first, std::min(kResizeJobsPerLaunch, jobs.size() - first), worker->stream);
  }
  // The scratch memory is reused by the next call and the outputs are read on other streams: wait here.
  FERRY_CUDA_CHECK(cudaStreamSynchronize(worker->stream));
  return errors;
}

#else  // no nvJPEG in this build

struct NvJpegDecoder::Library {};
struct NvJpegDecoder::Worker {};

NvJpegDecoder::NvJpegDecoder(int device) : device_(device) {
  throw Error("decoding JPEGs on the GPU needs a ferry build with nvJPEG: " + unavailable_reason() +
              "; use the jpeg decoder's device: cpu");
}

NvJpegDecoder::~NvJpegDecoder() = default;

std::string NvJpegDecoder::unavailable_reason() { return FERRY_NVJPEG_REASON; }

std::unique_ptr<NvJpegDecoder::Worker> NvJpegDecoder::acquire() { return nullptr; }

void NvJpegDecoder::release(std::unique_ptr<Worker> /*worker*/) {}

bool NvJpegDecoder::supported(const uint8_t* /*data*/, size_t /*size*/) const { return false; }

std::vector<std::string> NvJpegDecoder::decode(std::span<const GpuJpegImage> images) {
  return std::vector<std::string>(images.size(), "this build has no nvJPEG: " + unavailable_reason());
}

#endif

}  // namespace ferry::detail
