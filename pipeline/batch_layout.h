#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/pipeline/batch_schema.h"

namespace ferry {

/// Where one field of a batch sits in the packed buffer, and how pack fills it.
struct FieldLayout {
  at::ScalarType dtype = at::kByte;
  std::vector<int64_t> shape;  // the batch field's shape, e.g. [B, 3, 224, 224] or [B, Lmax] when padded
  size_t offset = 0;           // byte offset in the packed buffer: a multiple of max(alignment, element size)
  size_t bytes = 0;            // numel * element size

  // Filled from the samples (source_field >= 0: that field of every sample, one slot of
  // slot_bytes each, the tail of a short sample padded with `pad`), or from `made` (a contiguous
  // CPU tensor collate produced itself, such as a lengths field).
  int source_field = -1;
  size_t slot_bytes = 0;
  bool padded = false;
  std::array<std::byte, 8> pad{};  // one element of the pad value, element-size bytes used
  at::Tensor made;
  // A list field (CollateOptions::lists): the samples back to back, each at list_offsets[s] bytes after
  // `offset`, of shape list_shapes[s]; `shape` is then the elements of all, [total].
  std::vector<size_t> list_offsets;
  std::vector<std::vector<int64_t>> list_shapes;
  // A field that stays on the host: `made` is its collated CPU tensor; it takes no bytes of the buffer.
  bool host = false;
};

/// A whole batch's packed form: every field at its aligned offset within total_bytes.
struct BatchLayout {
  std::shared_ptr<const BatchSchema> schema;
  std::vector<FieldLayout> fields;  // in schema order
  size_t total_bytes = 0;
};

/// One cudaMemcpyAsync of a batch: `bytes` from `source` (in the staging slab, or a pinned tensor's
/// own memory) to `offset` in the batch's device buffer.
struct CopyChunk {
  size_t offset = 0;
  const std::byte* source = nullptr;
  size_t bytes = 0;
};

}  // namespace ferry
