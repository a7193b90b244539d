#include "ferry/pipeline/cuda_error.h"

#include <sstream>

#include "ferry/build_config.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry::detail {

void throw_cuda_error(int code, const char* call, const char* file, int line) {
  std::ostringstream out;
  out << call << " failed";
#if FERRY_HAVE_CUDART
  const auto error = static_cast<cudaError_t>(code);
  out << " with " << cudaGetErrorName(error) << " (" << cudaGetErrorString(error) << ")";
  // Reset the runtime's last-error slot so a recoverable error is not reported again by the next
  // unrelated call; sticky errors stay regardless.
  (void)cudaGetLastError();
  int device = -1;
  if (cudaGetDevice(&device) == cudaSuccess) {
    out << " at " << file << ":" << line << " on device " << device;
  } else {
    (void)cudaGetLastError();
    out << " at " << file << ":" << line << " (no current device)";
  }
#else
  out << " with error " << code << " at " << file << ":" << line << " (ferry built without the CUDA runtime)";
#endif
  throw CudaError(code, out.str());
}

}  // namespace ferry::detail
