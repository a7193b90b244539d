#include <ferry/pipeline/host_buffer_ring.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(HostBufferRing, ReusesABufferOnlyOnceNothingElseRefersToIt) {
  if (!HostBufferRing::reuses()) GTEST_SKIP() << "no reuse under ThreadSanitizer (host_buffer_ring.h says why)";
  HostBufferRing ring(3);
  at::Tensor first = ring.take(100);
  const void* memory = first.data_ptr();
  EXPECT_EQ(first.nbytes(), 100u);
  {
    const at::Tensor view = first.slice(0, 10, 20);  // a field of the batch, still held
    first.reset();
    const at::Tensor second = ring.take(100);
    EXPECT_NE(second.data_ptr(), memory) << "a buffer with a live view was handed out again";
  }
  // The view is gone: the first buffer is free again, and so is the second (dropped above).
  const at::Tensor again = ring.take(80);
  EXPECT_EQ(again.data_ptr(), memory);
  // A copy of the buffer tensor itself (Batch::buffer()) keeps it too.
  const at::Tensor held = again;
  const at::Tensor other = ring.take(80);
  EXPECT_NE(other.data_ptr(), memory);
}

TEST(HostBufferRing, AllocatesWhenEveryBufferIsHeldOrTooSmallAndKeepsAtMostItsCapacity) {
  if (!HostBufferRing::reuses()) GTEST_SKIP() << "no reuse under ThreadSanitizer (host_buffer_ring.h says why)";
  HostBufferRing ring(2);
  std::vector<at::Tensor> held;
  for (int i = 0; i < 5; ++i) held.push_back(ring.take(64));  // a consumer that keeps every batch
  for (size_t i = 0; i < held.size(); ++i) {
    for (size_t j = 0; j < i; ++j) EXPECT_NE(held[i].data_ptr(), held[j].data_ptr());
  }
  held.clear();
  const at::Tensor big = ring.take(4096);  // both kept buffers are free but too small: one is replaced
  EXPECT_GE(big.nbytes(), 4096u);
  const void* big_memory = big.data_ptr();
  const at::Tensor small = ring.take(10);  // the other, small one
  EXPECT_NE(small.data_ptr(), big_memory);
}

}  // namespace
}  // namespace ferry
