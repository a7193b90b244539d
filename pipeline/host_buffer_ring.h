#pragma once

#include <cstddef>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ferry {

/// CPU batch buffers, reused once nothing but the ring holds them.
///
/// A CPU pipeline delivers each batch in a buffer of its own (the consumer may keep a batch as long as it
/// likes). Allocating it afresh cost a token batch (131 KB) most of the h2d stage's time: above glibc's mmap
/// threshold every buffer was mapped, faulted in page by page and unmapped again. The ring keeps the last
/// `capacity` buffers and hands one out again once no tensor but its own refers to it: the batch's views
/// are gone (its storage has one reference) and so is every copy of its buffer tensor (one reference to
/// the tensor itself). A consumer that keeps its batches simply makes the ring allocate, as before.
///
/// Serial: one caller at a time (the h2d stage's prepare(), on pack's node: Note [work ahead]). A buffer's
/// references are dropped on other threads; a count of one is final, since only the ring could make another.
///
/// Under ThreadSanitizer the ring never reuses a buffer: the hand-back is ordered by libtorch's reference
/// counts, whose atomics are in uninstrumented libc10, so TSan would report the consumer's last read and the
/// next batch's copy into the same memory as a race (a fresh allocation is new memory to it).
class HostBufferRing {
 public:
  explicit HostBufferRing(size_t capacity) : capacity_(capacity) {}

  /// Whether this build reuses buffers (not under ThreadSanitizer).
  static constexpr bool reuses() noexcept {
#if defined(__SANITIZE_THREAD__)
    return false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    return false;
#else
    return true;
#endif
#else
    return true;
#endif
  }

  /// A 1-D uint8 CPU tensor of at least `bytes`: a free buffer of the ring that is large enough, else a
  /// new one (which replaces the ring's oldest free or smallest buffer when the ring is full). Allocates
  /// only then; does not block.
  at::Tensor take(size_t bytes);

 private:
  const size_t capacity_;
  std::vector<at::Tensor> buffers_;
  size_t next_ = 0;  // where the search starts: round robin, so that buffers age evenly
};

}  // namespace ferry
