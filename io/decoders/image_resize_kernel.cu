// The GPU JPEG decoder's resize kernel (image_resize_kernel.h). Compiled only in builds with nvJPEG.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "ferry/io/decoders/image_resize_kernel.h"
#include "ferry/pipeline/cuda_error.h"

namespace ferry::detail {
namespace {

template <size_t N>
struct ResizeLaunch {
  ResizeJob jobs[N];
};
static_assert(sizeof(ResizeLaunch<kResizeJobsPerLaunch>) <= 32000, "a launch's jobs must fit its parameters");

constexpr int kWeightBits = 11;  // as image_window.cpp
constexpr int32_t kWeightOne = 1 << kWeightBits;

struct Tap {
  int32_t first, second, weight;
};

// image_window.cpp's make_taps() for one coordinate, in the same double arithmetic: the _rn intrinsics
// keep nvcc from fusing the multiply and add (one rounding instead of two), so that every tap, and so
// every pixel, is the CPU path's.
__device__ Tap tap(int32_t source, int32_t resized, int32_t at) {
  const double scale = __ddiv_rn(static_cast<double>(source), static_cast<double>(resized));
  const double where = fmax(__dadd_rn(__dmul_rn(__dadd_rn(static_cast<double>(at), 0.5), scale), -0.5), 0.0);
  int32_t index = static_cast<int32_t>(where);
  double fraction = __dadd_rn(where, -static_cast<double>(index));
  if (index >= source - 1) {
    index = source - 1;
    fraction = 0;
  }
  return Tap{index, min(index + 1, source - 1), static_cast<int32_t>(lround(__dmul_rn(fraction, kWeightOne)))};
}

// Pixel (row, column) of the shrunk image, channel c: the rounded mean of its block.
__device__ int32_t shrunk(const ResizeJob& job, int32_t row, int32_t column, int c) {
  if (job.shrink == 1) return job.source[(int64_t{row} * job.width + column) * 3 + c];
  const int32_t y0 = row * job.shrink, x0 = column * job.shrink;
  const int32_t y1 = min(y0 + job.shrink, job.height), x1 = min(x0 + job.shrink, job.width);
  uint32_t sum = 0;
  for (int32_t y = y0; y < y1; ++y) {
    for (int32_t x = x0; x < x1; ++x) sum += job.source[(int64_t{y} * job.width + x) * 3 + c];
  }
  const auto area = static_cast<uint32_t>((y1 - y0) * (x1 - x0));
  return static_cast<int32_t>((sum + area / 2) / area);
}

// One thread per output pixel; blockIdx.y is the image.
template <size_t N>
__global__ void resize(const ResizeLaunch<N> launch) {
  const ResizeJob& job = launch.jobs[blockIdx.y];
  const int64_t pixel = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (pixel >= int64_t{job.out_w} * job.out_h) return;
  const auto y = static_cast<int32_t>(pixel / job.out_w), x = static_cast<int32_t>(pixel % job.out_w);
  const int32_t shrunk_w = (job.width + job.shrink - 1) / job.shrink;
  const int32_t shrunk_h = (job.height + job.shrink - 1) / job.shrink;
  const Tap row = tap(shrunk_h, job.resized_h, job.top + y);
  const Tap column = tap(shrunk_w, job.resized_w, job.left + x);
  constexpr int kShift = 2 * kWeightBits;
  constexpr int32_t kHalf = 1 << (kShift - 1);
  for (int c = 0; c < 3; ++c) {
    const int32_t upper = shrunk(job, row.first, column.first, c) * (kWeightOne - column.weight) +
                          shrunk(job, row.first, column.second, c) * column.weight;
    const int32_t lower = shrunk(job, row.second, column.first, c) * (kWeightOne - column.weight) +
                          shrunk(job, row.second, column.second, c) * column.weight;
    job.out[pixel * 3 + c] =
        static_cast<uint8_t>((upper * (kWeightOne - row.weight) + lower * row.weight + kHalf) >> kShift);
  }
}

}  // namespace

void launch_resize_kernel(const ResizeJob* jobs, size_t count, CudaStreamHandle stream) {
  if (count == 0) return;
  ResizeLaunch<kResizeJobsPerLaunch> launch;
  int64_t largest = 1;
  for (size_t i = 0; i < count; ++i) {
    launch.jobs[i] = jobs[i];
    largest = std::max<int64_t>(largest, int64_t{jobs[i].out_w} * jobs[i].out_h);
  }
  constexpr unsigned kThreads = 256;
  const auto blocks = static_cast<unsigned>((largest + kThreads - 1) / kThreads);
  resize<kResizeJobsPerLaunch><<<dim3(blocks, static_cast<unsigned>(count)), kThreads, 0, stream>>>(launch);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ferry::detail
