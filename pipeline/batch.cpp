#include "ferry/pipeline/batch.h"

#include <sstream>

#include "ferry/pipeline/cuda_event.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/torch_cuda.h"

namespace ferry {

Batch::Batch(std::shared_ptr<const BatchSchema> schema, std::vector<at::Tensor> tensors, BatchInfo info,
             at::Tensor buffer, std::shared_ptr<CudaEvent> ready, std::vector<std::vector<at::Tensor>> lists)
    : schema_(std::move(schema)),
      tensors_(std::move(tensors)),
      lists_(std::move(lists)),
      info_(std::move(info)),
      buffer_(std::move(buffer)),
      ready_(std::move(ready)) {
  const size_t names = schema_ ? schema_->size() : 0;
  if (names != tensors_.size()) {
    throw Error("batch has " + std::to_string(tensors_.size()) + " tensors for " + std::to_string(names) + " names");
  }
  if (!lists_.empty() && lists_.size() != names) {
    throw Error("batch has " + std::to_string(lists_.size()) + " lists for " + std::to_string(names) + " names");
  }
}

const std::vector<at::Tensor>* Batch::list_at(size_t position) const noexcept {
  // A batch has samples, so a list field has views; the other fields have none.
  if (position >= lists_.size() || lists_[position].empty()) return nullptr;
  return &lists_[position];
}

bool Batch::is_list(std::string_view name) const {
  const auto position = schema_ ? schema_->find(name) : std::nullopt;
  return position && list_at(*position) != nullptr;
}

const std::vector<at::Tensor>& Batch::list(std::string_view name) const {
  const auto position = schema_ ? schema_->find(name) : std::nullopt;
  if (position) {
    if (const std::vector<at::Tensor>* views = list_at(*position)) return *views;
  }
  std::ostringstream out;
  out << "batch field '" << name << "' is " << (position ? "not a list" : "not there") << "; its lists are:";
  bool any = false;
  for (size_t i = 0; i < names().size(); ++i) {
    if (list_at(i) != nullptr) {
      out << " '" << names()[i] << "'";
      any = true;
    }
  }
  if (!any) out << " none (collate.lists names them)";
  throw Error(out.str());
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
