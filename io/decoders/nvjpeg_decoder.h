#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
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
//  * The split node puts a plan's GPU-routed samples in one group (under `auto` a share of them, sized so
//    that the CPU threads and the hardware finish together: PipelineGraph::split), so that one task hands
//    the hardware a whole batch.
//  * The task reads the samples, on every idle decode thread at once (PipelineGraph::decode_samples),
//    and asks the decode stage for each field; a GPU field's JPEG header is
//    read on the CPU (TurboJPEG), the window the field keeps is planned exactly as on the CPU path
//    (plan_image_window: the same resize, center or random crop), and nvJPEG is asked whether its
//    hardware can decode the file (nvjpegDecodeBatchedSupported: baseline, YCbCr or grayscale, usual
//    subsamplings). Those it cannot (progressive, CMYK, 4:1:1 ...) are decoded on the CPU right there.
//  * NvJpegDecoder::decode() decodes the rest in one nvjpegDecodeBatched call, into the window's place in
//    one device allocation per group when the image needs no resize, else into a scratch image that one
//    kernel resizes and crops with the CPU path's arithmetic (11-bit fixed-point bilinear taps, after an
//    area average by the factor libjpeg-turbo's scaled IDCT would shrink by), then waits for its stream.
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
/// keeps and the shrink before the resize (jpeg_shrink_factor()), and where the window goes (device
/// memory, uint8 [window.out_h, window.out_w, 3], contiguous).
struct GpuJpegImage {
  const uint8_t* data = nullptr;
  size_t size = 0;
  int width = 0, height = 0;
  ImageWindow window;
  int shrink = 1;
  uint8_t* out = nullptr;
};

/// nvJPEG's hardware decoder on one GPU (Note [GPU JPEG decode]). Owns the library handle and, per call
/// that decodes at once (at most kMaxWorkers), a decoding state, a stream and a scratch buffer (kept in a
/// pool; no CUDA call is made under its lock). Thread-safe.
class NvJpegDecoder {
 public:
  /// For CUDA device `device`. Throws ferry::Error where this build has no nvJPEG (available() says why)
  /// or the device has no hardware JPEG decoder.
  explicit NvJpegDecoder(int device);
  ~NvJpegDecoder();
  NvJpegDecoder(const NvJpegDecoder&) = delete;
  NvJpegDecoder& operator=(const NvJpegDecoder&) = delete;

  /// "" where this build decodes JPEGs on the GPU; else why not.
  static std::string unavailable_reason();
  int device() const noexcept { return device_; }

  /// Whether the hardware decodes these bytes. Never throws: bytes nvJPEG cannot parse are "no" (the CPU
  /// decoder then says what is wrong with them). Thread-safe; does not block on the GPU.
  bool supported(const uint8_t* data, size_t size) const;

  /// Decodes `images` and writes each window to its `out`. Blocks until the device has finished. Returns,
  /// per image, "" or why it could not be decoded (nvJPEG's status). Throws ferry::CudaError for a
  /// failure of the device itself. Thread-safe: concurrent calls use separate states and streams, at most
  /// kMaxWorkers at once (a call beyond them waits for one).
  std::vector<std::string> decode(std::span<const GpuJpegImage> images);

  struct Worker;

  /// Decoding states in use at once. Each concurrent decode() call had its own state before: with prefetch
  /// 16, sixteen states, each with its own set-up and allocations, made the GPU groups take 31 s summed
  /// against 4.9 s with prefetch 4 (2xH200, 32 768 images). Four is what the prefetch-4 runs used.
  static constexpr size_t kMaxWorkers = 4;

 private:
  std::unique_ptr<Worker> acquire();
  void release(std::unique_ptr<Worker> worker);

  struct Library;
  const int device_;
  std::unique_ptr<Library> library_;
};

}  // namespace ferry::detail
