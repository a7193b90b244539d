// The GPU JPEG decoder's resize kernel (image_resize_kernel.h). Compiled only in builds with nvJPEG.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "ferry/io/decoders/image_resample.h"
#include "ferry/io/decoders/image_resize_kernel.h"
#include "ferry/pipeline/cuda_error.h"

namespace ferry::detail {
namespace {

template <size_t N>
struct ResizeLaunch {
  ResizeJob jobs[N];
};
static_assert(sizeof(ResizeLaunch<kResizeJobsPerLaunch>) <= 32000, "a launch's jobs must fit its parameters");

constexpr int32_t kHalf = int32_t{1} << (kResampleWeightBits - 1);

// A pass's rounding, as image_resample.cpp's clip8(): the sum (with its half unit) shifted, then clamped.
__device__ int32_t clip8(int32_t sum) { return min(max(sum >> kResampleWeightBits, 0), 255); }

// One thread per output pixel; blockIdx.y is the image. The CPU makes the horizontal pass a row at a
// time and the vertical pass over its uint8 results; here each pixel recomputes the horizontal values of
// the rows it reads, rounded the same way, so the bytes are the CPU's: integer arithmetic only.
template <size_t N>
__global__ void resize(const ResizeLaunch<N> launch) {
  const ResizeJob& job = launch.jobs[blockIdx.y];
  const int64_t pixel = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (pixel >= int64_t{job.out_w} * job.out_h) return;
  const auto y = static_cast<int32_t>(pixel / job.out_w);
  const auto x = static_cast<int32_t>(pixel % job.out_w);
  const int32_t column = job.flip != 0 ? job.out_w - 1 - x : x;
  const int32_t col_first = job.columns.first[column], col_count = job.columns.count[column];
  const int32_t* col_weights = job.columns.weights + int64_t{column} * job.columns.max_taps;
  const int32_t row_first = job.rows.first[y], row_count = job.rows.count[y];
  const int32_t* row_weights = job.rows.weights + int64_t{y} * job.rows.max_taps;
  const int64_t stride = int64_t{job.width} * 3;
  int32_t out[3] = {kHalf, kHalf, kHalf};
  for (int32_t r = 0; r < row_count; ++r) {
    const uint8_t* line = job.source + (row_first + r) * stride + int64_t{col_first} * 3;
    int32_t across[3] = {kHalf, kHalf, kHalf};
    for (int32_t c = 0; c < col_count; ++c) {
      const int32_t k = col_weights[c];
      across[0] += line[3 * c] * k;
      across[1] += line[3 * c + 1] * k;
      across[2] += line[3 * c + 2] * k;
    }
    const int32_t k = row_weights[r];
    for (int ch = 0; ch < 3; ++ch) out[ch] += clip8(across[ch]) * k;
  }
  for (int ch = 0; ch < 3; ++ch) job.out[pixel * 3 + ch] = static_cast<uint8_t>(clip8(out[ch]));
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
