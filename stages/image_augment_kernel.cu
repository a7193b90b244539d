// The image augmentation kernel (Note [image augment] in image_augment.h). Compiled only in GPU builds
// with a CUDA compiler; no libtorch here.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "ferry/pipeline/cuda_error.h"
#include "ferry/stages/image_augment_kernel.h"

namespace ferry::detail {
namespace {

// A launch's draws, in its parameters. Two sizes: a small batch's launch does not pass 20 KiB of
// parameters to use 2 KiB of them.
template <size_t N>
struct AugmentLaunch {
  AugmentShape shape;
  AugmentDraw draws[N];
};
constexpr size_t kSmallLaunch = 64;
static_assert(sizeof(AugmentLaunch<kAugmentDrawsPerLaunch>) <= 32000,
              "a launch's draws must fit the 32 KiB of kernel parameters");

__device__ inline void store(void* out, int64_t index, float value, int32_t dtype) {
  switch (dtype) {
    case 1: static_cast<__half*>(out)[index] = __float2half_rn(value); break;
    case 2: static_cast<__nv_bfloat16*>(out)[index] = __float2bfloat16_rn(value); break;
    default: static_cast<float*>(out)[index] = value; break;
  }
}

// One thread per output pixel (its three channels); blockIdx.y is the sample.
template <size_t N>
__global__ void augment(const uint8_t* images, const AugmentLaunch<N> launch, void* out) {
  const AugmentShape& shape = launch.shape;
  const int64_t plane = int64_t{shape.out_h} * shape.out_w;
  const int64_t pixel = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (pixel >= plane) return;
  const int64_t sample = blockIdx.y;
  const AugmentDraw& draw = launch.draws[sample];
  const auto y = static_cast<int32_t>(pixel / shape.out_w);
  const auto x = static_cast<int32_t>(pixel % shape.out_w);
  const AugmentTap row = augment_tap(y, draw.top, draw.height, shape.out_h);
  const AugmentTap column = augment_tap(draw.flip != 0 ? shape.out_w - 1 - x : x, draw.left, draw.width, shape.out_w);
  const uint8_t* image = images + sample * int64_t{shape.in_h} * shape.in_w * 3;
  const int64_t first = sample * plane * 3;
  for (int c = 0; c < 3; ++c) {
    const float value = augment_value(image, shape, row, column, c) * shape.scale[c] + shape.shift[c];
    store(out, first + (shape.nchw != 0 ? c * plane + pixel : pixel * 3 + c), value, shape.dtype);
  }
}

template <size_t N>
void launch(const uint8_t* images, const AugmentDraw* draws, size_t count, const AugmentShape& shape, void* out,
            CudaStreamHandle stream) {
  AugmentLaunch<N> launch;
  launch.shape = shape;
  for (size_t i = 0; i < count; ++i) launch.draws[i] = draws[i];
  constexpr unsigned kThreads = 256;
  const int64_t plane = int64_t{shape.out_h} * shape.out_w;
  const auto blocks = static_cast<unsigned>((plane + kThreads - 1) / kThreads);
  augment<N><<<dim3(blocks, static_cast<unsigned>(count)), kThreads, 0, stream>>>(images, launch, out);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_augment_kernel(const uint8_t* images, const AugmentDraw* draws, size_t count, const AugmentShape& shape,
                           void* out, CudaStreamHandle stream) {
  if (count == 0) return;
  if (count <= kSmallLaunch) {
    launch<kSmallLaunch>(images, draws, count, shape, out, stream);
  } else {
    launch<kAugmentDrawsPerLaunch>(images, draws, count, shape, out, stream);
  }
}

}  // namespace ferry::detail
