#include "ferry/io/workers/shared_slots.h"

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>

#include <ATen/ATen.h>

#include "ferry/io/util/units.h"
#include "ferry/pipeline/error.h"

namespace ferry::detail {

SharedSlots::~SharedSlots() {
  for (const Segment& segment : segments_) {
    munmap(segment.base, segment.bytes);
    close(segment.fd);
  }
}

Slot SharedSlots::acquire(uint64_t bytes) {
  const unsigned size_class =
      std::max<unsigned>(kSmallest, static_cast<unsigned>(std::bit_width(std::max<uint64_t>(bytes, 1) - 1)));
  if (size_class >= 48) throw Error("a sample of " + format_byte_size(bytes) + " is more than shared memory can hold");
  const uint64_t slot_bytes = uint64_t{1} << size_class;
  const size_t index = size_class - kSmallest;
  std::lock_guard lock(mutex_);
  if (free_.size() <= index) free_.resize(index + 1);
  std::vector<Slot>& free = free_[index];
  if (free.empty()) {
    const uint64_t count = std::max<uint64_t>(1, kSegmentBytes / slot_bytes);
    Segment segment;
    segment.bytes = count * slot_bytes;
    segment.fd = memfd_create("ferry-samples", MFD_CLOEXEC);
    if (segment.fd < 0 || ftruncate(segment.fd, static_cast<off_t>(segment.bytes)) != 0) {
      const int error = errno;
      if (segment.fd >= 0) close(segment.fd);
      throw Error("cannot make " + format_byte_size(segment.bytes) + " of shared memory for worker processes' samples: " +
                  std::strerror(error));
    }
    void* base = mmap(nullptr, segment.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, segment.fd, 0);
    if (base == MAP_FAILED) {
      const int error = errno;
      close(segment.fd);
      throw Error("cannot map " + format_byte_size(segment.bytes) + " of shared memory for worker processes' samples: " +
                  std::strerror(error));
    }
    segment.base = static_cast<std::byte*>(base);
    const auto number = static_cast<uint32_t>(segments_.size());
    segments_.push_back(segment);
    // Handed out from the front: the first slots' pages are the ones already touched.
    for (uint64_t i = count; i-- > 0;) {
      free.push_back(Slot{number, i * slot_bytes, slot_bytes, segment.base + i * slot_bytes});
    }
  }
  Slot slot = free.back();
  free.pop_back();
  return slot;
}

void SharedSlots::release(const Slot& slot) {
  const auto size_class = static_cast<unsigned>(std::countr_zero(slot.capacity));
  std::lock_guard lock(mutex_);
  free_[size_class - kSmallest].push_back(slot);
}

std::shared_ptr<const Slot> SharedSlots::lease(uint64_t bytes) {
  std::shared_ptr<SharedSlots> self = shared_from_this();
  const Slot slot = acquire(bytes);
  return std::shared_ptr<const Slot>(new Slot(slot), [self](const Slot* leased) {
    self->release(*leased);
    delete leased;
  });
}

at::Tensor SharedSlots::view(const std::shared_ptr<const Slot>& slot, uint64_t offset, at::ScalarType dtype,
                             at::IntArrayRef shape) {
  return at::from_blob(
      slot->data + offset, shape, [slot](void*) {}, at::TensorOptions().dtype(dtype));
}

int SharedSlots::fd(uint32_t segment) const {
  std::lock_guard lock(mutex_);
  return segments_.at(segment).fd;
}

uint64_t SharedSlots::segment_bytes(uint32_t segment) const {
  std::lock_guard lock(mutex_);
  return segments_.at(segment).bytes;
}

}  // namespace ferry::detail
