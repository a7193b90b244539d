#pragma once

#include <cstddef>
#include <vector>

namespace ferry {

/// A CPU tensor is packed (copied with its neighbours in one transfer) only up to this size: larger
/// ones gain nothing from sharing a transfer and would cost an extra CPU copy into the chunk.
constexpr size_t kMaxPackedTensorBytes = size_t{256} * 1024;
/// No packed chunk is larger: with a huge min_packed_alignment_bytes (2^63 is accepted), padding to
/// the next tensor then starts a new chunk instead of asking for a staging buffer of exabytes.
constexpr size_t kMaxPackedChunkBytes = size_t{1} << 30;

/// How start_copy() / TensorCopy::start() move tensors. The defaults suit the main case: many small
/// CPU tensors in pageable memory going to one GPU.
struct CopyOptions {
  /// Host-to-device: stage through page-locked memory from libtorch's pinned allocator, so that the
  /// copy is truly asynchronous. Device-to-host: the result itself is pinned. No effect on CPU→CPU
  /// or GPU→GPU.
  bool use_pinned_staging = true;
  /// CPU→CUDA: contiguous tensors of at most kMaxPackedTensorBytes are packed into chunks, one
  /// cudaMemcpyAsync per chunk instead of one per tensor.
  bool pack_cpu_tensors = true;
  /// Each packed tensor starts at a multiple of max(this, its element size) within its chunk (of
  /// their least common multiple, which is the same for powers of two: a tensor must start at a
  /// multiple of its element size). At least 1.
  size_t min_packed_alignment_bytes = 16;
  /// A chunk's payload (tensor bytes plus the padding between them) stays at most this, and at most
  /// kMaxPackedChunkBytes whatever this says; a tensor larger than this is not packed. At least 1.
  size_t max_packed_chunk_bytes = size_t{32} << 20;
  /// Staging, allocation and copy submission run on ferry's copy thread (CopyWorker) and start
  /// returns at once; false: they run inside start, on the caller's thread.
  bool use_background_thread = true;
};

/// Throws ferry::Error naming the first invalid option and its value. Does not allocate otherwise.
void validate(const CopyOptions& options);

/// How a TensorCopy handled its tensors (each tensor counts in exactly one of the first five).
struct CopyPlanStats {
  size_t reused = 0;         // already on the target device: returned as is, no copy
  size_t packed = 0;         // copied inside a packed chunk
  size_t packed_chunks = 0;  // chunks (= host-to-device transfers) the packed tensors took
  size_t staged = 0;         // copied through an intermediate buffer (pinned or contiguous copy)
  size_t direct = 0;         // one copy from the input's memory straight into the result
  /// Payload of each chunk in order: tensor bytes plus padding, each at most max_packed_chunk_bytes.
  std::vector<size_t> chunk_payload_bytes;
};

}  // namespace ferry
