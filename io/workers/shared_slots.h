#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ferry::detail {

/// A piece of shared memory that a worker process writes one sample into and the pipeline packs from.
struct Slot {
  uint32_t segment = 0;
  uint64_t offset = 0;    // within the segment
  uint64_t capacity = 0;  // bytes
  std::byte* data = nullptr;
};

/// Shared memory for worker processes' samples: anonymous memory files (memfd), mapped here and, through
/// their descriptors, in the workers. Nothing has a name in /dev/shm, so nothing is left behind when a
/// process dies, however it dies: the memory goes with its last mapping.
///
/// Slots come in power-of-two sizes from 4 KiB up, each size from segments of its own, and are reused
/// once the tensors viewing them are gone (lease()). The memory grows to what the pipeline holds at once
/// (its batches in flight), never past it, and is given back when the last lease and the SharedSlots go.
/// Thread-safe.
class SharedSlots : public std::enable_shared_from_this<SharedSlots> {
 public:
  static std::shared_ptr<SharedSlots> make() { return std::shared_ptr<SharedSlots>(new SharedSlots()); }
  ~SharedSlots();
  SharedSlots(const SharedSlots&) = delete;
  SharedSlots& operator=(const SharedSlots&) = delete;

  /// A free slot of at least `bytes`. Throws ferry::Error when the memory cannot be had (naming how much).
  Slot acquire(uint64_t bytes);
  /// Returns a slot that no tensor views.
  void release(const Slot& slot);
  /// A slot that goes back when the last holder of the returned pointer (and of every tensor view()
  /// made from it) is gone.
  std::shared_ptr<const Slot> lease(uint64_t bytes);
  /// A tensor of `dtype` and `shape` over `slot`'s bytes from `offset`, keeping the slot leased.
  static at::Tensor view(const std::shared_ptr<const Slot>& slot, uint64_t offset, at::ScalarType dtype,
                         at::IntArrayRef shape);

  /// The segment's descriptor (for a worker to map it) and size.
  int fd(uint32_t segment) const;
  uint64_t segment_bytes(uint32_t segment) const;

 private:
  SharedSlots() = default;
  struct Segment {
    int fd = -1;
    std::byte* base = nullptr;
    uint64_t bytes = 0;
  };
  // Power-of-two sizes from 2^kSmallest bytes; slots of one size are carved from segments of about
  // kSegmentBytes (one slot where a slot is larger).
  static constexpr unsigned kSmallest = 12;
  static constexpr uint64_t kSegmentBytes = uint64_t{32} << 20;

  mutable std::mutex mutex_;
  std::vector<Segment> segments_;
  std::vector<std::vector<Slot>> free_;  // by size class
};

}  // namespace ferry::detail
