#include "ferry/pipeline/buffer_carver.h"

#include "ferry/pipeline/align_up.h"
#include "ferry/pipeline/tensor_views.h"

namespace ferry {

at::Tensor BufferCarver::take(size_t bytes) {
  if (bytes == 0 || bytes > kMaxPiece) return allocate_(bytes);
  const size_t rounded = align_up(bytes, kAlignment);
  if (!chunk_.defined() || used_ + rounded > static_cast<size_t>(chunk_.nbytes())) {
    chunk_ = allocate_(kChunkBytes);  // the old one lives on in the batches cut from it
    used_ = 0;
  }
  at::Tensor piece = make_view(chunk_.storage(), chunk_.device(), at::kByte, used_, {static_cast<int64_t>(bytes)});
  used_ += rounded;
  return piece;
}

}  // namespace ferry
