#include "ferry/pipeline/host_buffer_ring.h"

#include <optional>

#include <ATen/ops/empty.h>

namespace ferry {
namespace {

bool free_buffer(const at::Tensor& buffer) { return buffer.use_count() == 1 && buffer.storage().use_count() == 1; }

}  // namespace

at::Tensor HostBufferRing::take(size_t bytes) {
  if (!reuses()) return at::empty({static_cast<int64_t>(bytes)}, at::kByte);
  const size_t count = buffers_.size();
  std::optional<size_t> replace;  // a free buffer too small, to make room for the new one
  for (size_t i = 0; i < count; ++i) {
    const size_t at = (next_ + i) % count;
    const at::Tensor& buffer = buffers_[at];
    if (!free_buffer(buffer)) continue;
    if (buffer.nbytes() >= bytes) {
      next_ = (at + 1) % count;
      return buffer;
    }
    if (!replace) replace = at;
  }
  at::Tensor made = at::empty({static_cast<int64_t>(bytes)}, at::kByte);
  if (count < capacity_) {
    buffers_.push_back(made);
  } else if (replace) {
    buffers_[*replace] = made;
  }
  return made;
}

}  // namespace ferry
