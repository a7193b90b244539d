#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ferry/io/decoders/image_window.h"

// Internal: not installed. Compiled in every build; decodes only where FERRY_NVJPEG is 1.

namespace ferry::detail {

// Note [GPU JPEG decode]
// ~~~~~~~~~~~~~~~~~~~~~~
// A jpeg field with `device: gpu` or `auto` is decoded by nvJPEG's hardware decoder (the NVJPG engines of
// an A100 or H100), which works beside the CPU cores rather than on them. Where it happens: in the
// decode node, as with the CPU decoder, so that a failure stays the sample's own (on_error: skip drops
// or replaces it as it does any other sample) and the order, the cutter and resumption see nothing new.
//  * The split node cuts a plan into groups of about PipelineGraph::kGpuGroup images, so that one task
//    hands the hardware many images at once. Under `gpu` each group is decoded on the GPU; under `auto`
//    where auto's measurement says when its task starts (Note [auto: the faster decoder] in
//    pipeline/auto_decode_choice.h).
//  * The task reads the samples, on every idle decode thread at once (PipelineGraph::decode_samples),
//    and asks the decode stage for each field; a GPU field's JPEG header is
//    read on the CPU (TurboJPEG), the window the field keeps is planned exactly as on the CPU path
//    (plan_image_window: the same resize, crop and flip), and nvJPEG is asked whether its
//    hardware can decode the file (nvjpegDecodeBatchedSupported: baseline, YCbCr or grayscale, usual
//    subsamplings). Those it cannot (progressive, CMYK, 4:1:1 ...) are decoded on the CPU right there.
//  * NvJpegDecoder::decode() decodes the rest in one nvjpegDecodeBatched call, into the window's place in
//    one device allocation per group when the image needs no resize, else into a scratch image that one
//    kernel resizes, crops and flips with the CPU path's arithmetic (Pillow's filter from the same tap
//    tables, made on the host: image_resize_kernel.h), then waits for its stream. dct_scaling is a CPU
//    decoder's shortcut: the GPU always decodes the whole image.
//    A batch that fails is decoded again image by image, so that only the damaged images fail; each is
//    then tried on the CPU, and what fails there too is the sample's error, with its key.
//  * The samples' fields are then device tensors. Pack leaves their slots in the slab empty and h2d copies
//    them into the batch's buffer with the gather kernel, on the copy stream; the slab's lease keeps them
//    until that copy's event has completed (Note [direct copies]).
// nvJPEG's IDCT and colour conversion differ slightly from libjpeg-turbo's: the same file can differ by a
// few levels per pixel between the paths (tests/cuda/jpeg_gpu_cuda_test.cpp measures and bounds it).
// Under `device: gpu` which path decodes a file depends on the file only, so runs repeat byte for byte;
// under `auto` it depends on timing, so they repeat up to that difference. Crops, flips and order never
// depend on the path.

/// One image for NvJpegDecoder::decode(): its encoded bytes (host memory), its size, the window the field
/// keeps and the filter that resamples it, and where the window goes (device memory, uint8
/// [window.out_h(), window.out_w(), 3], contiguous).
struct GpuJpegImage {
  const uint8_t* data = nullptr;
  size_t size = 0;
  int width = 0, height = 0;
  ImageWindow window;
  ImageDecodeOptions::Interpolation interpolation = ImageDecodeOptions::Interpolation::kBilinear;
  bool antialias = true;
  uint8_t* out = nullptr;
};

/// nvJPEG's hardware decoder on one GPU (Note [GPU JPEG decode]). Owns the library handle and, per call
/// that decodes at once (at most kMaxWorkers), a decoding state, a stream and a scratch buffer (kept in a
/// pool; no CUDA call is made under its lock). Thread-safe.
class NvJpegDecoder {
 public:
  /// kNow: the library handle made in the constructor, which throws if it cannot be. kInBackground: the
  /// handle made on a thread of its own while the caller goes on (`auto`, where the CPU decodes everything
  /// until ready()). Either way the decoding states are then warmed there one after another, each with a
  /// first decode (Note [warming the decoding states]); ready() with the first warm state. A background
  /// start that fails before that leaves it never ready (failure() says why); a state that fails to warm
  /// is left to a decode() call, which makes it cold and reports what goes wrong there.
  enum class Start { kNow, kInBackground };

  /// For CUDA device `device`. Throws ferry::Error where this build has no nvJPEG (unavailable_reason()
  /// says why), and under kNow where the device has no hardware JPEG decoder.
  explicit NvJpegDecoder(int device, Start start = Start::kNow);
  ~NvJpegDecoder();  // waits for the start-up thread: the handle it makes, the state it warms (each 0.1-0.4 s)
  NvJpegDecoder(const NvJpegDecoder&) = delete;
  NvJpegDecoder& operator=(const NvJpegDecoder&) = delete;

  /// "" where this build decodes JPEGs on the GPU; else why not.
  static std::string unavailable_reason();
  int device() const noexcept { return device_; }

  /// Whether a decoding state is warm (a decode() call then starts at once). Thread-safe.
  bool ready() const noexcept { return room() > 0; }
  /// The decoding states warmed so far: 0 before ready(), kMaxWorkers once all are. Thread-safe.
  size_t room() const noexcept;
  /// Why a background start failed; "" if it did not (or has not finished). Thread-safe.
  std::string failure() const;
  /// Seconds from the construction until ready() (0 while not ready).
  double ready_seconds() const noexcept;
  /// Seconds during which at least one decode() call was in the hardware: how busy the GPU decoder was.
  double busy_seconds() const noexcept;
  /// Decoding-state seconds: the time each decode() call held a state, summed. Over kMaxWorkers x the
  /// run's time, how much of the decoder's capacity was used (one call at a time does not fill it:
  /// bench/jpeg_decode, 38k images/s on one state against 70k on four).
  double state_busy_seconds() const noexcept;

  /// Whether the hardware decodes these bytes. Never throws: bytes nvJPEG cannot parse are "no" (the CPU
  /// decoder then says what is wrong with them), and so is everything before the library handle is made
  /// (a background start). Thread-safe; does not block on the GPU.
  bool supported(const uint8_t* data, size_t size) const;

  /// Decodes `images` and writes each window to its `out`. Blocks until the device has finished (in the
  /// operating system, not spinning: the waiting thread leaves its core to the CPU decoders). Returns, per
  /// image, "" or why it could not be decoded (nvJPEG's status). Throws ferry::CudaError for a failure of
  /// the device itself, and ferry::Error before the library handle is made (a background start). Waits
  /// for a warm decoding state while they are being warmed. Thread-safe: concurrent calls use separate
  /// states and streams, at most kMaxWorkers at once (a call beyond them waits for one).
  std::vector<std::string> decode(std::span<const GpuJpegImage> images);

  struct Worker;

  /// Decoding states in use at once, not one per concurrent decode() call: with prefetch 16, sixteen
  /// states, each with its own set-up and allocations, made the GPU groups take 31 s summed against 4.9 s
  /// with prefetch 4 (2xH200, 32 768 images). bench/jpeg_decode on an H200: 1 caller 38k
  /// images/s, 2 callers 61k, 4 callers 70k (batches of 256).
  static constexpr size_t kMaxWorkers = 4;

 private:
  void create();  // the library handle
  void warm();    // kMaxWorkers workers, each after a first decode; ready() after the first
  std::unique_ptr<Worker> acquire();
  void release(std::unique_ptr<Worker> worker);
  std::vector<std::string> decode_on(Worker& worker, std::span<const GpuJpegImage> images);
  void mark_busy(bool starting) noexcept;  // a decode() call enters (true) or leaves (false) the hardware

  struct Library;
  const int device_;
  std::unique_ptr<Library> library_;
  const uint64_t made_ns_;                  // steady clock, at construction
  std::atomic<uint64_t> ready_ns_{0};       // since made_ns_
  std::atomic<uint64_t> busy_ns_{0};        // finished busy spells
  std::atomic<uint64_t> state_busy_ns_{0};  // decoding states in use, integrated over time
  std::atomic<bool> made_{false};           // the library handle is made: decode() and supported() work
  std::atomic<size_t> warm_workers_{0};     // room(); ready() once above 0
  std::atomic<bool> stopping_{false};       // the destructor runs: warm no more states
  std::thread starter_;                     // warms the states; makes the handle under kInBackground
};

}  // namespace ferry::detail
