#include "ferry/pipeline/batch.h"

#include <sstream>

#include "ferry/pipeline/error.h"

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

}  // namespace ferry
