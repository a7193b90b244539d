#pragma once

#include <string>

#include "ferry/pipeline/error.h"

namespace ferry {

/// A failed CUDA runtime call. The message names the call as written, the file:line of the call,
/// the current device and the runtime's own error name and text.
class CudaError : public Error {
 public:
  CudaError(int code, std::string message) : Error(std::move(message)), code_(code) {}
  /// The cudaError_t value.
  int code() const noexcept { return code_; }

 private:
  int code_;
};

namespace detail {
[[noreturn]] void throw_cuda_error(int code, const char* call, const char* file, int line);

inline void check_cuda(int code, const char* call, const char* file, int line) {
  if (code != 0) [[unlikely]]
    throw_cuda_error(code, call, file, line);
}
}  // namespace detail

}  // namespace ferry

/// Checks the cudaError_t of a CUDA runtime call and throws ferry::CudaError naming the call,
/// file:line and device when it is not cudaSuccess. Use it on every runtime call whose failure
/// matters; calls whose failure is an expected outcome (cudaEventQuery's cudaErrorNotReady) are
/// handled where they are made.
#define FERRY_CUDA_CHECK(call) ::ferry::detail::check_cuda(static_cast<int>(call), #call, __FILE__, __LINE__)
