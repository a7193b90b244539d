#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/copy/copy_options.h>
#include <ferry/copy/copy_worker.h>
#include <ferry/copy/packed_chunks.h>
#include <ferry/copy/tensor_copy.h>
#include <ferry/pipeline/cuda_device.h>
#include "tests/support/error_text.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;

TEST(CopyOptions, InvalidValuesAreNamedWithTheirValue) {
  CopyOptions options;
  options.min_packed_alignment_bytes = 0;
  EXPECT_TRUE(contains(error_of([&] { validate(options); }), "min_packed_alignment_bytes must be at least 1, got 0"));
  options = CopyOptions{};
  options.max_packed_chunk_bytes = 0;
  EXPECT_TRUE(contains(error_of([&] { validate(options); }), "max_packed_chunk_bytes must be at least 1, got 0"));
  // ACCV-Lab's multi_tensor_copier takes any alignment of at least 1, powers of two or not.
  for (size_t alignment :
       {size_t{1}, size_t{2}, size_t{3}, size_t{6}, size_t{12}, size_t{16}, size_t{48}, size_t{4096}, SIZE_MAX}) {
    CopyOptions valid;
    valid.min_packed_alignment_bytes = alignment;
    valid.max_packed_chunk_bytes = 1;
    EXPECT_NO_THROW(validate(valid));
  }
}

// multi_tensor_copier's rule, max(minimum, element size), where one divides the other; their least common
// multiple otherwise, so that each tensor starts at a multiple of its element size.
TEST(PackedChunks, TheAlignmentIsTheMaximumOrTheLeastCommonMultiple) {
  for (const size_t minimum : {size_t{1}, size_t{2}, size_t{4}, size_t{16}, size_t{256}}) {
    for (const size_t element : {size_t{1}, size_t{2}, size_t{4}, size_t{8}, size_t{16}}) {
      EXPECT_EQ(detail::packed_alignment(minimum, element), std::max(minimum, element)) << minimum << " " << element;
    }
  }
  EXPECT_EQ(detail::packed_alignment(6, 1), 6u);
  EXPECT_EQ(detail::packed_alignment(6, 4), 12u);
  EXPECT_EQ(detail::packed_alignment(6, 8), 24u);
  EXPECT_EQ(detail::packed_alignment(3, 2), 6u);
  EXPECT_EQ(detail::packed_alignment(24, 8), 24u);
  EXPECT_EQ(detail::packed_alignment(100, 16), 400u);
  EXPECT_EQ(detail::packed_alignment(SIZE_MAX, 2), SIZE_MAX);  // the lcm would not fit
  EXPECT_EQ(detail::packed_alignment(SIZE_MAX, 1), SIZE_MAX);
  EXPECT_EQ(detail::packed_alignment((size_t{1} << 63) + 1, 4), SIZE_MAX);

  CopyOptions options;
  options.min_packed_alignment_bytes = 6;
  // bytes, element size: uint8 3 bytes, float32 ×2, uint8 ×2, float64 ×2
  const std::vector<detail::PackItem> items{{3, 1}, {8, 4}, {2, 1}, {16, 8}};
  const std::vector<detail::PackedChunk> chunks = detail::plan_packed_chunks(items, options);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].offsets, (std::vector<size_t>{0, 12, 24, 48}));  // 3 -> 12 (lcm 12), 20 -> 24, 26 -> 48
  EXPECT_EQ(chunks[0].payload_bytes, 64u);
}

TEST(PackedChunks, EachTensorStartsAtItsAlignmentAndChunksStayWithinTheLimit) {
  CopyOptions options;
  options.min_packed_alignment_bytes = 4;
  options.max_packed_chunk_bytes = 64;
  // bytes, element size
  const std::vector<detail::PackItem> items{{10, 1}, {8, 8}, {3, 1}, {40, 4}, {2, 2}, {64, 8}, {0, 4}, {1, 1}};
  const std::vector<detail::PackedChunk> chunks = detail::plan_packed_chunks(items, options);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].members, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(chunks[0].offsets, (std::vector<size_t>{0, 16, 24}));  // 10 -> 16 (8-byte elements), 24 -> 24
  EXPECT_EQ(chunks[0].payload_bytes, 27u);
  EXPECT_EQ(chunks[1].members, (std::vector<size_t>{3, 4}));  // 40 at 28 would end at 68 > 64
  EXPECT_EQ(chunks[1].offsets, (std::vector<size_t>{0, 40}));
  EXPECT_EQ(chunks[1].payload_bytes, 42u);
  EXPECT_EQ(chunks[2].members, (std::vector<size_t>{5, 6}));  // 64 bytes fill a chunk; an empty one still fits
  EXPECT_EQ(chunks[2].offsets, (std::vector<size_t>{0, 64}));
  EXPECT_EQ(chunks[2].payload_bytes, 64u);
  EXPECT_EQ(chunks[3].members, (std::vector<size_t>{7}));  // 1 byte at 64 would exceed the limit
  EXPECT_EQ(chunks[3].payload_bytes, 1u);
}

TEST(PackedChunks, RandomItemsKeepOrderAlignmentAndLimit) {
  std::mt19937 rng(5);
  for (int round = 0; round < 300; ++round) {
    CopyOptions options;
    // Powers of two, and (a third of the rounds) any alignment.
    options.min_packed_alignment_bytes = rng() % 3 == 0 ? 1 + rng() % 300 : size_t{1} << (rng() % 9);
    options.max_packed_chunk_bytes = 1 + rng() % 5000;
    std::vector<detail::PackItem> items(rng() % 60);
    for (detail::PackItem& item : items) {
      item.element_size = size_t{1} << (rng() % 4);
      const size_t elements = options.max_packed_chunk_bytes / item.element_size;
      item.bytes = item.element_size * (elements == 0 ? 0 : rng() % (elements + 1));
    }
    const std::vector<detail::PackedChunk> chunks = detail::plan_packed_chunks(items, options);
    size_t next = 0;
    for (const detail::PackedChunk& chunk : chunks) {
      ASSERT_FALSE(chunk.members.empty());
      EXPECT_LE(chunk.payload_bytes, options.max_packed_chunk_bytes);
      size_t end = 0;
      for (size_t m = 0; m < chunk.members.size(); ++m) {
        const detail::PackItem& item = items[chunk.members[m]];
        EXPECT_EQ(chunk.members[m], next++) << "input order";
        EXPECT_EQ(chunk.offsets[m] % std::max(options.min_packed_alignment_bytes, item.element_size), 0u);
        EXPECT_EQ(chunk.offsets[m] % item.element_size, 0u) << "a tensor starts at a multiple of its element size";
        EXPECT_GE(chunk.offsets[m], end) << "no overlap";
        end = chunk.offsets[m] + item.bytes;
      }
      EXPECT_EQ(chunk.payload_bytes, end);
    }
    EXPECT_EQ(next, items.size());
    // Greedy: the first item of each chunk after the first would not have fitted in the one before.
    for (size_t c = 1; c < chunks.size(); ++c) {
      const detail::PackItem& first = items[chunks[c].members.front()];
      const size_t alignment = detail::packed_alignment(options.min_packed_alignment_bytes, first.element_size);
      const size_t offset = (chunks[c - 1].payload_bytes + alignment - 1) / alignment * alignment;
      EXPECT_GT(offset + first.bytes, options.max_packed_chunk_bytes);
    }
  }
}

// The extremes start_copy accepts: an alignment of 2^63 (every tensor starts a chunk, at 0: the
// padding would run past any limit, kMaxPackedChunkBytes included) and chunks of 1 byte or of
// SIZE_MAX. Nothing may overflow into a small offset, nor ask for a chunk of exabytes.
TEST(PackedChunks, ExtremeAlignmentsAndLimitsDoNotOverflow) {
  const std::vector<detail::PackItem> items{{10, 1}, {8, 8}, {3, 1}, {0, 4}, {1, 1}};
  for (const size_t alignment : {size_t{1} << 63, size_t{1} << 62, SIZE_MAX, (size_t{1} << 63) + 1, size_t{1}}) {
    for (const size_t limit : {size_t{16}, SIZE_MAX, SIZE_MAX - 7}) {
      CopyOptions options;
      options.min_packed_alignment_bytes = alignment;
      options.max_packed_chunk_bytes = limit;
      ASSERT_NO_THROW(validate(options));
      const std::vector<detail::PackedChunk> chunks = detail::plan_packed_chunks(items, options);
      size_t members = 0;
      for (const detail::PackedChunk& chunk : chunks) {
        EXPECT_LE(chunk.payload_bytes, limit);
        for (size_t m = 0; m < chunk.members.size(); ++m) {
          EXPECT_EQ(chunk.offsets[m] % detail::packed_alignment(alignment, items[chunk.members[m]].element_size), 0u);
          EXPECT_LE(chunk.offsets[m], chunk.payload_bytes);
        }
        members += chunk.members.size();
      }
      EXPECT_EQ(members, items.size());
      EXPECT_LE(chunks.back().payload_bytes, kMaxPackedChunkBytes);
      if (alignment >= (size_t{1} << 62)) {  // padding to such an alignment must start a new chunk
        for (const detail::PackedChunk& chunk : chunks) {
          for (const size_t offset : chunk.offsets) EXPECT_EQ(offset, 0u);
        }
      }
    }
  }
  CopyOptions one_byte;
  one_byte.min_packed_alignment_bytes = 1;
  one_byte.max_packed_chunk_bytes = 1;
  EXPECT_EQ(detail::plan_packed_chunks({{1, 1}, {1, 1}, {0, 1}}, one_byte).size(), 2u);
}

TEST(PackedChunks, AnItemLargerThanAChunkIsRefused) {
  CopyOptions options;
  options.max_packed_chunk_bytes = 8;
  EXPECT_TRUE(contains(error_of([&] {
                         detail::plan_packed_chunks({{9, 1}}, options);
                       }),
                       "cannot pack 9 bytes into chunks of at most 8"));
}

TEST(CopyWorker, RunsJobsInTheOrderPostedAndHandsEveryExceptionToItsJob) {
  constexpr int kJobs = 200;
  std::vector<int> order;
  std::atomic<int> failed{0};
  std::promise<void> all_done;
  for (int i = 0; i < kJobs; ++i) {
    detail::CopyWorker::post(
        [i, &order, &all_done] {
          order.push_back(i);  // only the worker thread writes: FIFO on one thread
          if (i % 10 == 0) throw std::runtime_error("job " + std::to_string(i));
          if (i == kJobs - 1) all_done.set_value();
        },
        [&failed](std::exception_ptr error) {
          try {
            std::rethrow_exception(error);
          } catch (const std::runtime_error&) {
            ++failed;
          }
        });
  }
  ASSERT_EQ(all_done.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
  ASSERT_EQ(order.size(), static_cast<size_t>(kJobs));
  for (int i = 0; i < kJobs; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_EQ(failed.load(), kJobs / 10);
}

std::vector<at::Tensor> some_cpu_tensors() {
  return {at::randn({3, 4}),           at::randint(0, 100, {1000}, at::kLong),
          at::ones({0, 5}, at::kHalf), at::scalar_tensor(true),
          at::randn({6, 8}).t(),       at::randn({20, 20}).slice(0, 0, 20, 3)};
}

TEST(TensorCopy, CpuToCpuReusesEveryTensorAsIs) {
  for (bool background : {true, false}) {
    const std::vector<at::Tensor> inputs = some_cpu_tensors();
    CopyOptions options;
    options.use_background_thread = background;
    std::unique_ptr<TensorCopy> copy = TensorCopy::start(inputs, at::Device("cpu"), options);
    const std::vector<at::Tensor>& results = copy->wait();
    ASSERT_EQ(results.size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_TRUE(results[i].is_same(inputs[i])) << i;
      EXPECT_EQ(results[i].data_ptr(), inputs[i].data_ptr()) << i;
    }
    EXPECT_TRUE(copy->ready());
    EXPECT_EQ(copy->plan().reused, inputs.size());
    EXPECT_EQ(copy->plan().packed_chunks, 0u);
    EXPECT_EQ(&copy->wait(), &results) << "wait() may be called again";
    EXPECT_EQ(copy->device(), at::Device(at::kCPU));
    EXPECT_FALSE(copy->failed_tensor());
  }
}

TEST(TensorCopy, AnEmptyListCompletes) {
  std::unique_ptr<TensorCopy> copy = TensorCopy::start({}, at::kCPU, CopyOptions{});
  EXPECT_TRUE(copy->wait().empty());
  EXPECT_TRUE(copy->ready());
}

TEST(TensorCopy, BadOptionsOrTargetThrowAtStart) {
  CopyOptions options;
  options.max_packed_chunk_bytes = 0;
  EXPECT_TRUE(contains(error_of([&] { TensorCopy::start({at::ones({1})}, at::kCPU, options); }),
                       "max_packed_chunk_bytes must be at least 1"));
  EXPECT_TRUE(contains(error_of([] { TensorCopy::start({at::ones({1})}, at::Device("meta"), CopyOptions{}); }),
                       "only cpu and cuda targets"));
}

TEST(TensorCopy, AnUnsupportedInputIsReportedByItsPositionOnEveryWait) {
  for (bool background : {true, false}) {
    std::vector<at::Tensor> inputs = some_cpu_tensors();
    inputs.insert(inputs.begin() + 2, at::empty({4}, at::TensorOptions().device(at::kMeta).dtype(at::kInt)));
    inputs.push_back(at::Tensor());
    CopyOptions options;
    options.use_background_thread = background;
    std::unique_ptr<TensorCopy> copy = TensorCopy::start(inputs, at::kCPU, options);
    const std::string message = error_of([&] { copy->wait(); });
    EXPECT_EQ(message,
              "ferry: copy failed: tensor 2 of 8 (Int [4] on meta) to cpu: tensors on meta cannot be copied; "
              "only cpu and cuda tensors can");
    EXPECT_EQ(error_of([&] { copy->wait(); }), message);
    EXPECT_EQ(copy->failed_tensor(), std::optional<size_t>(2));
    EXPECT_TRUE(copy->ready());
  }
  std::unique_ptr<TensorCopy> undefined = TensorCopy::start({at::ones({1}), at::Tensor()}, at::kCPU, CopyOptions{});
  EXPECT_TRUE(
      contains(error_of([&] { undefined->wait(); }), "tensor 1 of 2 (undefined) to cpu: the tensor is undefined"));
}

TEST(TensorCopy, ACudaTargetWithoutAGpuFailsAtStart) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  for (const char* device : {"cuda", "cuda:0", "cuda:3"}) {
    for (bool background : {true, false}) {
      CopyOptions options;
      options.use_background_thread = background;
      const std::string message =
          error_of([&] { TensorCopy::start(some_cpu_tensors(), at::Device(device), options); });
      EXPECT_TRUE(contains(message, std::string("cannot copy to ") + device + ": ")) << message;
      EXPECT_TRUE(contains(message, "no GPU support") || contains(message, "no CUDA device")) << message;
    }
  }
}

TEST(TensorCopy, DestroyingCopiesBeforeTheyAreDoneIsFine) {
  // Many submissions queue up on the copy thread; most handles go before theirs has run.
  std::vector<std::unique_ptr<TensorCopy>> copies;
  for (int i = 0; i < 500; ++i) {
    std::vector<at::Tensor> tensors = some_cpu_tensors();
    if (i % 5 == 0) tensors.push_back(at::empty({2}, at::TensorOptions().device(at::kMeta)));  // fails in the copy
    copies.push_back(TensorCopy::start(std::move(tensors), at::kCPU, CopyOptions{}));
    if (i % 3 == 0) copies.pop_back();
  }
  std::unique_ptr<TensorCopy> last = TensorCopy::start(some_cpu_tensors(), at::kCPU, CopyOptions{});
  copies.clear();
  EXPECT_EQ(last->wait().size(), some_cpu_tensors().size());
}

}  // namespace
}  // namespace ferry
