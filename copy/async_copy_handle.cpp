#include "ferry/copy/async_copy_handle.h"

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "ferry/pipeline/error.h"

namespace ferry {

AsyncCopyHandle::AsyncCopyHandle(Nested structure, std::unique_ptr<TensorCopy> copy)
    : structure_(std::move(structure)), copy_(std::move(copy)) {}

const TensorCopy& AsyncCopyHandle::copy() const {
  if (!copy_) throw Error(ErrorContext{"copy"}, "the handle was moved from");
  return *copy_;
}

bool AsyncCopyHandle::ready() const { return copy().ready(); }

Nested AsyncCopyHandle::get() {
  (void)copy();
  try {
    const std::vector<at::Tensor>& results = copy_->wait();
    if (!result_) result_ = structure_.with_tensors(results);
    return *result_;
  } catch (const Error& e) {
    const std::optional<size_t> failed = copy_->failed_tensor();
    if (!failed) throw;
    const std::vector<std::string> paths = structure_.tensor_paths();
    if (*failed >= paths.size() || paths[*failed].empty()) throw;  // a lone tensor: its index says it
    throw Error(e.context(), "data" + paths[*failed] + ": " + e.cause());
  }
}

const CopyPlanStats& AsyncCopyHandle::plan() const { return copy().plan(); }

at::Device AsyncCopyHandle::device() const { return copy().device(); }

AsyncCopyHandle start_copy(Nested data, at::Device device, const CopyOptions& options) {
  std::unique_ptr<TensorCopy> copy = TensorCopy::start(data.tensors(), device, options);
  return AsyncCopyHandle(std::move(data), std::move(copy));
}

}  // namespace ferry
