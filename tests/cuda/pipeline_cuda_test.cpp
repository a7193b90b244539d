#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

#include <ferry/build_config.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/stages/standard_pipeline.h>
#include <ferry/stages/standard_stages.h>
#include "tests/support/reference_batch.h"

#if FERRY_WITH_GPU
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ferry {
namespace {

#if FERRY_WITH_GPU

class PipelineCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
  }
};

SyntheticOptions fields(uint64_t samples) {
  SyntheticOptions options;
  options.seed = 9;
  options.samples = samples;
  options.fields = {
      SyntheticField{"x", at::kFloat, {64, 33}, false, 0, 0, std::nullopt},
      SyntheticField{"ids", at::kInt, {}, true, 1, 300, std::nullopt},
      SyntheticField{"h", at::kHalf, {3}, false, 0, 0, std::nullopt},
  };
  return options;
}

TEST_F(PipelineCuda, DeliversGpuResidentBatchesFromPinnedSlabs) {
  auto truth = std::make_shared<const SyntheticSource>(fields(512));
  PipelineOptions options;
  options.device = "cuda";
  options.batch_size = 32;
  StageSet stages = make_standard_stages(truth, options);
  std::shared_ptr<PinnedPool> pool = stages.pool;
  Pipeline pipeline = pipeline_from_stages(std::move(stages), options);
  uint64_t batches = 0;
  for (const Batch& batch : pipeline) {
    EXPECT_TRUE(batch.device().is_cuda());
    EXPECT_TRUE(batch.buffer().is_cuda());
    for (const at::Tensor& field : batch.tensors()) {
      EXPECT_TRUE(field.is_cuda());
      EXPECT_TRUE(field.storage().is_alias_of(batch.buffer().storage())) << "fields are views of one allocation";
    }
    ASSERT_TRUE(batch.ready_event());
    EXPECT_EQ(testing::compare_with_reference(batch, *truth), "");
    ++batches;
  }
  EXPECT_EQ(batches, 16u);
  EXPECT_TRUE(pool->pinned());
  EXPECT_EQ(pool->stats().host_alloc_calls, 1u) << "cudaHostAlloc after start-up";
  EXPECT_EQ(pool->stats().waits, 0u);
}

// The consumer works on its own stream, which a sleep kernel keeps busy, and drops each batch right
// after queueing work on it. The batch's memory must not be reused by a later batch's copy before
// that queued work has read it (record_stream), and the work must see the copied data (the stream
// waits on the batch's event). Any ordering mistake shows up as wrong values.
TEST_F(PipelineCuda, BatchesAreSafeOnTheConsumersStreamEvenWhenDroppedEarly) {
  auto truth = std::make_shared<const SyntheticSource>(fields(640));
  PipelineOptions options;
  options.device = "cuda:0";
  options.batch_size = 16;
  options.prefetch = 4;
  Pipeline pipeline = make_pipeline(truth, options);

  c10::cuda::CUDAStream consumer = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0);
  c10::cuda::CUDAStreamGuard on_consumer(consumer);
  std::vector<at::Tensor> copies;
  std::vector<std::vector<uint64_t>> indices;
  for (;;) {
    std::optional<Batch> batch = pipeline.next();
    if (!batch) break;
    at::cuda::sleep(2'000'000);  // ~1 ms of GPU time ahead of the reads below, on the consumer stream
    copies.push_back(batch->at("x").clone());
    indices.push_back(batch->sample_indices());
  }  // each batch is dropped while the clone that reads it is still queued
  consumer.synchronize();
  ASSERT_EQ(copies.size(), 40u);
  for (size_t i = 0; i < copies.size(); ++i) {
    const auto reference = testing::reference_batch(*truth, indices[i]);
    EXPECT_TRUE(copies[i].cpu().equal(reference[0].second)) << "batch " << i << " was overwritten or read early";
  }
}

// Small batches are slices of shared device chunks (Note [carved device buffers]). Batches the consumer
// keeps, across several chunks and at random shapes, must keep their bytes after the pipeline has moved
// on to later chunks and after the pipeline is gone; dropping some early must free nothing still held.
TEST_F(PipelineCuda, SmallBatchesCutFromSharedChunksKeepTheirBytesWhileHeld) {
  for (const uint64_t seed : {1u, 2u, 3u}) {
    SyntheticOptions source_options = fields(0);
    source_options.seed = seed;
    source_options.samples = 2000;
    source_options.fields[0].shape = {static_cast<int64_t>((8 + seed * 13) * 4), 17};  // 74-294 KB batches
    auto truth = std::make_shared<const SyntheticSource>(source_options);
    PipelineOptions options;
    options.device = "cuda";
    options.batch_size = 8 + 5 * seed;
    options.prefetch = 2 + seed;
    std::vector<Batch> kept;
    std::set<const void*> chunks;
    {
      Pipeline pipeline = make_pipeline(truth, options);
      uint64_t seen = 0;
      while (std::optional<Batch> batch = pipeline.next()) {
        const at::Tensor& buffer = batch->buffer();
        EXPECT_LT(static_cast<size_t>(buffer.nbytes()), buffer.storage().nbytes()) << "a slice of a chunk";
        EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data_ptr()) % 512, 0u);
        chunks.insert(buffer.storage().data());
        if (seen++ % 3 != 1) kept.push_back(std::move(*batch));  // every third one is dropped at once
      }
    }
    EXPECT_GT(chunks.size(), 1u) << "the run spans several chunks";
    at::cuda::sleep(1'000'000);  // later work on the stream the batches are used on
    at::Tensor scratch = at::full({1 << 22}, 7, at::TensorOptions().device(at::kCUDA).dtype(at::kByte));
    for (const Batch& batch : kept) EXPECT_EQ(testing::compare_with_reference(batch, *truth), "") << "seed " << seed;
  }
}

// Samples whose large tensor is pinned (even indices) or pageable (odd), beside a small field: the
// pinned ones are copied to the device in place, the rest through the slab; all must arrive intact.
class HalfPinnedSource : public Source {
 public:
  HalfPinnedSource() {
    specs_ = {FieldSpec{"big", at::kFloat, {300'000}, std::nullopt, "raw"},
              FieldSpec{"small", at::kInt, {7}, std::nullopt, "raw"}};
    for (int64_t i = 0; i < 24; ++i) {
      at::Tensor big = at::rand({300'000});
      samples_.push_back({i % 2 == 0 ? big.pin_memory() : big, at::randint(1000, {7}, at::kInt)});
    }
  }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  uint64_t size() const override { return samples_.size(); }
  EncodedSample read(uint64_t index) const override {
    return EncodedSample{index, "half-pinned:" + std::to_string(index), samples_[index]};
  }
  std::string describe() const override { return "half-pinned"; }
  const std::vector<at::Tensor>& sample(uint64_t index) const { return samples_[index]; }

 private:
  std::vector<FieldSpec> specs_;
  std::vector<std::vector<at::Tensor>> samples_;
};

TEST_F(PipelineCuda, CopiesPinnedTensorsInPlaceAndTheRestThroughTheSlab) {
  auto source = std::make_shared<HalfPinnedSource>();
  ASSERT_TRUE(source->sample(0)[0].is_pinned());
  PipelineOptions options;
  options.device = "cuda";
  options.batch_size = 3;
  options.epochs = 2;
  options.transfer.max_chunk_bytes = 1 << 20;  // several chunks per in-place tensor too
  Pipeline pipeline = make_pipeline(source, options);
  uint64_t batches = 0;
  for (const Batch& batch : pipeline) {
    const at::Tensor big = batch["big"].cpu();
    const at::Tensor small = batch["small"].cpu();
    for (size_t s = 0; s < batch.batch_size(); ++s) {
      const auto& expected = source->sample(batch.sample_indices()[s]);
      ASSERT_TRUE(big[static_cast<int64_t>(s)].equal(expected[0])) << "big, sample " << batch.sample_indices()[s];
      ASSERT_TRUE(small[static_cast<int64_t>(s)].equal(expected[1])) << "small, sample " << batch.sample_indices()[s];
    }
    ++batches;
  }
  EXPECT_EQ(batches, 16u);
}

#else

TEST(PipelineCuda, NeedsAGpuBuild) { GTEST_SKIP() << "not a GPU build: " FERRY_BUILD_REASON; }

#endif

}  // namespace
}  // namespace ferry
