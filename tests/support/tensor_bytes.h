#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include <ATen/ATen.h>

namespace ferry::testing {

/// A 1-d uint8 CPU tensor holding exactly `text`'s bytes, in an allocation of exactly that size (so
/// a reader that runs past the end is caught by ASan).
inline at::Tensor tensor_of_text(const std::string& text) {
  at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  if (!text.empty()) std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  return bytes;
}

/// Every byte of a CPU tensor of any dtype, in its logical (contiguous) order.
inline std::string text_of(const at::Tensor& tensor) {
  if (tensor.numel() == 0) return "";
  const at::Tensor dense = tensor.contiguous();
  return std::string(static_cast<const char*>(dense.data_ptr()), dense.nbytes());
}

}  // namespace ferry::testing
