#include "ferry/pipeline/batch.h"

#include <sstream>

#include "ferry/pipeline/cuda_event.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/torch_cuda.h"

namespace ferry {

Batch::Batch(std::shared_ptr<const BatchSchema> schema, std::vector<at::Tensor> tensors, BatchInfo info,
             at::Tensor buffer, std::shared_ptr<CudaEvent> ready)
    : schema_(std::move(schema)),
      tensors_(std::move(tensors)),
      info_(std::move(info)),
      buffer_(std::move(buffer)),
      ready_(std::move(ready)) {
  const size_t names = schema_ ? schema_->size() : 0;
  if (names != tensors_.size()) {
    throw Error("batch has " + std::to_string(tensors_.size()) + " tensors for " + std::to_string(names) + " names");
  }
}

const std::vector<std::string>& Batch::names() const {
  static const std::vector<std::string> kNone;
  return schema_ ? schema_->names() : kNone;
}

const at::Tensor* Batch::find(std::string_view name) const {
  if (!schema_) return nullptr;
  const auto position = schema_->find(name);
  return position ? &tensors_[*position] : nullptr;
}

const at::Tensor& Batch::operator[](std::string_view name) const {
  if (const at::Tensor* tensor = find(name)) return *tensor;
  std::ostringstream out;
  out << "batch has no field '" << name << "'; its fields are:";
  for (const std::string& known : names()) out << " '" << known << "'";
  if (names().empty()) out << " (none)";
  throw Error(out.str());
}

at::Device Batch::device() const {
  if (buffer_.defined()) return buffer_.device();
  for (const at::Tensor& tensor : tensors_) {
    if (tensor.defined()) return tensor.device();
  }
  return at::Device(at::kCPU);
}

size_t Batch::nbytes() const {
  size_t total = 0;
  for (const at::Tensor& tensor : tensors_) total += tensor.defined() ? tensor.nbytes() : 0;
  return total;
}

void Batch::ready_on_current_stream() const {
  if (!ready_ || !device().is_cuda()) return;
  const int index = device().index();
  DeviceGuard guard(index);
  // The allocator must learn the stream too, or it could reuse the memory under that stream's kernels
  // once the batch is dropped.
  const CudaStreamHandle stream = detail::current_torch_stream(index);
  ready_->wait_on(stream);
  detail::record_stream(buffer_, stream);
}

}  // namespace ferry
