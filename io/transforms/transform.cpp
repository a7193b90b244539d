#include "ferry/io/transforms/transform.h"

#include "ferry/io/util/splitmix64.h"
#include "ferry/pipeline/error.h"

namespace ferry {

uint64_t SampleContext::random_seed() const noexcept {
  return mix64(seed ^ mix64(epoch + kGoldenGamma * mix64(index + kGoldenGamma)));
}

SampleFields::SampleFields(std::vector<std::string> names, std::vector<at::Tensor> tensors)
    : names_(std::move(names)), tensors_(std::move(tensors)) {
  if (names_.size() != tensors_.size()) {
    throw Error("a sample of " + std::to_string(names_.size()) + " field names and " + std::to_string(tensors_.size()) +
                " tensors");
  }
}

bool SampleFields::has(std::string_view name) const noexcept {
  for (const std::string& known : names_) {
    if (known == name) return true;
  }
  return false;
}

const at::Tensor& SampleFields::at(std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return tensors_[i];
  }
  std::string known;
  for (const std::string& field : names_) known += (known.empty() ? "" : ", ") + field;
  throw Error("the sample has no field '" + std::string(name) + "' (its fields: " + known + ")");
}

void SampleFields::set(std::string_view name, at::Tensor tensor) {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) {
      tensors_[i] = std::move(tensor);
      return;
    }
  }
  names_.emplace_back(name);
  tensors_.push_back(std::move(tensor));
}

void SampleFields::erase(std::string_view name) {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) {
      names_.erase(names_.begin() + static_cast<std::ptrdiff_t>(i));
      tensors_.erase(tensors_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

}  // namespace ferry
