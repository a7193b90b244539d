#pragma once

// The CUDA runtime's opaque handle types, named without including cuda_runtime.h, so that ferry's
// public headers build where there is no CUDA toolkit. They are the same types as cudaStream_t
// and cudaEvent_t.
struct CUstream_st;
struct CUevent_st;

namespace ferry {
using CudaStreamHandle = ::CUstream_st*;
using CudaEventHandle = ::CUevent_st*;
}  // namespace ferry
