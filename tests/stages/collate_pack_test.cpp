#include <cstring>
#include <random>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <oneapi/tbb/task_arena.h>

#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/io/formats/synthetic_source.h>
#include <ferry/pipeline/error.h>
#include <ferry/pipeline/field_loop.h>
#include <ferry/stages/collate_stage.h>
#include <ferry/stages/decode_stage.h>
#include <ferry/stages/pack_stage.h>
#include "tests/support/random_options.h"
#include "tests/support/reference_batch.h"

namespace ferry {
namespace {

const std::atomic<bool> kRunning{false};

// A batch of `indices` decoded by the real decode stage, ready for collate.
BatchWork decoded_batch(const std::shared_ptr<const SyntheticSource>& source, std::vector<uint64_t> indices) {
  auto plan = std::make_shared<BatchPlan>();
  plan->sample_indices = std::move(indices);
  DecodeStage decode(source, DecoderRegistry::global());
  BatchWork work;
  work.info.sample_indices = plan->sample_indices;
  for (size_t i = 0; i < plan->sample_indices.size(); ++i) {
    auto sample = std::make_shared<SampleWork>();
    sample->plan = plan;
    sample->position = static_cast<uint32_t>(i);
    decode.run(*sample);
    work.samples.push_back(std::move(sample));
  }
  return work;
}

std::shared_ptr<PinnedPool> pool_of(size_t bytes) {
  PinnedPoolOptions options;
  options.slab_bytes = bytes;
  options.slab_count = 1;
  options.pinned = false;
  return PinnedPool::create(options);
}

// Places what a SamplePlacer takes of each sample of `work` into a slab of `pool`, as the split node and the
// decode threads do (Note [placing samples]), and hands the slab to the batch as the collate node does.
// Returns the bytes placed; `slab` keeps what the samples point at.
size_t place_samples(BatchWork& work, const CollateStage& collate, const std::shared_ptr<PinnedPool>& pool,
                     size_t budget, std::shared_ptr<PlacedSlab>& slab) {
  const std::vector<SamplePlacer::Field> fields = collate.leading_fixed_fields();
  if (fields.empty()) return 0;
  SamplePlacer placer(fields, pool, /*direct_copy_bytes=*/0, budget);
  std::atomic<uint64_t> waited{0};
  slab = placer.reserve(work.samples.size(), kRunning, waited);
  if (!slab) return 0;
  size_t placed = 0;
  for (const auto& sample : work.samples) {
    sample->slab = slab.get();
    placed += placer.place(*sample);
  }
  work.slab = std::move(slab->lease);
  return placed;
}

// Packs `work` and checks every field's bytes in the slab against the reference collate. With `placed`,
// the samples' leading fixed-size fields are placed in the slab first (Note [placing samples]).
void expect_packed_like_reference(BatchWork& work, const SyntheticSource& source, const CollateOptions& options,
                                  size_t alignment, bool placed = false) {
  CollateStage collate(source.fields(), options, alignment);
  collate.run(work, kRunning);
  auto pool = pool_of(std::max<size_t>(work.layout.total_bytes, 1));
  TransferOptions transfer;
  transfer.min_alignment = alignment;
  transfer.max_chunk_bytes = 4096;
  transfer.parallel_pack_bytes = 1024;  // exercise the parallel path too
  std::shared_ptr<PlacedSlab> slab;
  if (placed) {
    const size_t bytes = place_samples(work, collate, pool, transfer.parallel_pack_bytes, slab);
    const std::vector<SamplePlacer::Field> leading = collate.leading_fixed_fields();
    size_t expected = 0;  // each sample places its leading fields in order while they fit its budget
    for (size_t s = 0; s < work.samples.size(); ++s) {
      size_t budget = transfer.parallel_pack_bytes;
      for (const SamplePlacer::Field& field : leading) {
        if (field.sample_bytes <= budget) {
          budget -= field.sample_bytes;
          expected += field.sample_bytes;
        }
      }
    }
    EXPECT_EQ(bytes, expected);
    collate.run(work, kRunning);  // again, as in a pipeline: after the samples were placed
  }
  PackStage(pool, transfer).run(work, kRunning);

  const auto reference = testing::reference_batch(source, work.info.sample_indices, options);
  ASSERT_EQ(work.layout.fields.size(), reference.size());
  size_t end_of_previous = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const FieldLayout& field = work.layout.fields[i];
    const auto& [name, want] = reference[i];
    EXPECT_EQ(work.layout.schema->names()[i], name);
    EXPECT_EQ(field.dtype, want.scalar_type()) << name;
    EXPECT_EQ(at::IntArrayRef(field.shape), want.sizes()) << name;
    EXPECT_EQ(field.offset % std::max(alignment, c10::elementSize(field.dtype)), 0u) << name;
    EXPECT_GE(field.offset, end_of_previous) << name << " overlaps the field before it";
    end_of_previous = field.offset + field.bytes;
    ASSERT_EQ(field.bytes, want.nbytes()) << name;
    if (field.bytes != 0) {  // an empty tensor's data pointer may be null
      EXPECT_EQ(std::memcmp(work.slab.data() + field.offset, want.contiguous().data_ptr(), field.bytes), 0)
          << "field '" << name << "' differs from the reference";
    }
  }
  EXPECT_EQ(work.layout.total_bytes, end_of_previous);
  size_t covered = 0;
  for (const CopyChunk& chunk : work.chunks) {
    EXPECT_EQ(chunk.offset, covered);
    EXPECT_EQ(chunk.source, work.slab.data() + chunk.offset);  // nothing here is pinned: all from the slab
    EXPECT_LE(chunk.bytes, transfer.max_chunk_bytes);
    covered += chunk.bytes;
  }
  EXPECT_EQ(covered, work.layout.total_bytes);
}

TEST(CollateAndPack, StackFixedFieldsAndPadVariableOnesWithLengths) {
  SyntheticOptions options;
  options.seed = 5;
  options.samples = 20;
  options.fields = {
      SyntheticField{"image", at::kByte, {3, 5, 7}, false, 0, 0, std::nullopt},
      SyntheticField{"tokens", at::kInt, {}, true, 0, 12, std::nullopt},
      SyntheticField{"boxes", at::kFloat, {4}, true, 1, 6, std::nullopt},
  };
  auto source = std::make_shared<const SyntheticSource>(options);
  BatchWork work = decoded_batch(source, {3, 0, 19, 7, 7, 12});
  expect_packed_like_reference(work, *source, CollateOptions{}, 16);
  EXPECT_EQ(work.layout.schema->names(),
            (std::vector<std::string>{"image", "tokens", "tokens_lengths", "boxes", "boxes_lengths"}));
}

TEST(CollateAndPack, UsesPerFieldPadValuesConvertedToTheFieldDtype) {
  SyntheticOptions options;
  options.samples = 8;
  options.fields = {
      SyntheticField{"ids", at::kLong, {}, true, 0, 9, std::pair{0.0, 100.0}},
      SyntheticField{"mask", at::kHalf, {3}, true, 0, 5, std::nullopt},
      SyntheticField{"bytes", at::kByte, {}, true, 0, 5, std::nullopt},
  };
  CollateOptions collate;
  collate.pad_value = 7;
  collate.pad_values = {{"ids", -1.0}, {"mask", 0.5}};
  collate.lengths_suffix = "_len";
  auto source = std::make_shared<const SyntheticSource>(options);
  BatchWork work = decoded_batch(source, {0, 1, 2, 3, 4, 5, 6, 7});
  expect_packed_like_reference(work, *source, collate, 16);
}

// 60 rounds of a random source and a random batch of 1 to 9 of its samples, round r at alignment_of(r),
// each checked against the reference (with `placed`, its samples placed first).
void expect_random_batches_like_reference(uint64_t seed, size_t (*alignment_of)(int), bool placed) {
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 60; ++round) {
    const size_t alignment = alignment_of(round);
    auto source = std::make_shared<const SyntheticSource>(testing::random_synthetic_options(rng, 50));
    std::vector<uint64_t> indices(1 + rng() % 9);
    for (auto& index : indices) index = rng() % 50;
    BatchWork work = decoded_batch(source, indices);
    SCOPED_TRACE("round " + std::to_string(round) + ", alignment " + std::to_string(alignment));
    expect_packed_like_reference(work, *source, CollateOptions{}, alignment, placed);
  }
}

TEST(CollateAndPack, RandomFieldsMatchTheReferenceAtEveryAlignment) {
  expect_random_batches_like_reference(
      20261125, [](int round) { return size_t{16} << (round % 5); }, /*placed=*/false);  // 16 .. 256
}

// Note [placing samples]: the leading fixed-size fields copied into the slab as each sample is decoded,
// the rest packed, give the reference's bytes, at every alignment.
TEST(CollateAndPack, PlacedSamplesGiveTheReferenceBytesAtEveryAlignment) {
  expect_random_batches_like_reference(
      20261128, [](int round) { return size_t{1} << (round % 9); }, /*placed=*/true);  // 1 .. 256
}

// Batches of hundreds of fields are decoded, laid out and packed on several threads (Note [wide
// batches]): the same bytes in the same places as the reference, in arenas of 1 to 8 threads.
TEST(CollateAndPack, WideBatchesMatchTheReferenceInArenasOfOneToEightThreads) {
  std::mt19937_64 rng(20261127);
  for (int threads : {1, 2, 4, 8}) {
    tbb::task_arena arena(threads);
    arena.execute([&] {
      for (int round = 0; round < 4; ++round) {
        const auto fields = static_cast<int64_t>(kWideBatchFields) - 2 + (rng() % 600);
        auto source =
            std::make_shared<const SyntheticSource>(testing::random_synthetic_options(rng, 20, fields, fields));
        std::vector<uint64_t> indices(1 + rng() % 5);
        for (auto& index : indices) index = rng() % 20;
        BatchWork work = decoded_batch(source, indices);
        SCOPED_TRACE(std::to_string(threads) + " threads, round " + std::to_string(round) + ", " +
                     std::to_string(fields) + " fields");
        expect_packed_like_reference(work, *source, CollateOptions{}, 16);
      }
    });
  }
}

// Whichever thread lays out which field, a wide batch's error names the first field that is wrong.
TEST(CollateAndPack, AWideBatchNamesItsFirstFieldWhoseShapeDiffers) {
  SyntheticOptions options;
  options.samples = 4;
  for (int f = 0; f < 1000; ++f) {
    options.fields.push_back(
        SyntheticField{std::string("x").append(std::to_string(f)), at::kFloat, {2}, false, 0, 0, std::nullopt});
  }
  auto source = std::make_shared<const SyntheticSource>(options);
  for (int threads : {1, 4, 8}) {
    tbb::task_arena arena(threads);
    arena.execute([&] {
      for (int round = 0; round < 5; ++round) {
        BatchWork work = decoded_batch(source, {0, 1, 2});
        for (size_t f : {size_t{999}, size_t{640}, size_t{333}, size_t{334}})
          work.samples[1]->fields[f] = at::zeros({3});
        try {
          CollateStage(source->fields(), CollateOptions{}, 16).run(work, kRunning);
          FAIL();
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("field 'x333': sample 1 has shape [3] but sample 0 has [2]"),
                    std::string::npos)
              << e.what();
        }
      }
    });
  }
}

TEST(CollateAndPack, MaxBatchBytesBoundsEveryBatch) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 30; ++round) {
    auto source = std::make_shared<const SyntheticSource>(testing::random_synthetic_options(rng, 40));
    CollateStage collate(source->fields(), CollateOptions{}, 16);
    for (size_t batch = 1; batch <= 8; batch += 3) {
      std::vector<uint64_t> indices(batch);
      for (auto& index : indices) index = rng() % 40;
      BatchWork work = decoded_batch(source, indices);
      collate.run(work, kRunning);
      ASSERT_TRUE(collate.max_batch_bytes(batch));
      EXPECT_LE(work.layout.total_bytes, *collate.max_batch_bytes(batch));
    }
  }
}

TEST(CollateAndPack, NamesTheSampleWhoseFixedShapeDiffers) {
  SyntheticOptions options;
  options.samples = 4;
  options.fields = {SyntheticField{"x", at::kFloat, {2}, false, 0, 0, std::nullopt}};
  auto source = std::make_shared<const SyntheticSource>(options);
  BatchWork work = decoded_batch(source, {0, 1, 2});
  work.samples[2]->fields[0] = at::zeros({3});  // as a misbehaving decoder would
  CollateStage collate(source->fields(), CollateOptions{}, 16);
  try {
    collate.run(work, kRunning);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'x': sample 2 has shape [3] but sample 0 has [2]"), std::string::npos)
        << e.what();
  }
}

TEST(CollateAndPack, RefusesABatchLargerThanASlab) {
  SyntheticOptions options;
  options.samples = 4;
  options.fields = {SyntheticField{"x", at::kFloat, {1000}, false, 0, 0, std::nullopt}};
  auto source = std::make_shared<const SyntheticSource>(options);
  BatchWork work = decoded_batch(source, {0, 1});
  CollateStage(source->fields(), CollateOptions{}, 16).run(work, kRunning);
  try {
    PackStage(pool_of(4096), TransferOptions{}).run(work, kRunning);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("packs to 8000 bytes but a staging slab holds 4096; raise pool.slab_bytes"),
              std::string::npos)
        << e.what();
  }
}

TEST(CollateAndPack, RejectsPadValuesThatDoNotFitOrNameNoVariableField) {
  SyntheticOptions options;
  options.fields = {SyntheticField{"v", at::kByte, {}, true, 0, 4, std::nullopt},
                    SyntheticField{"f", at::kFloat, {}, false, 0, 0, std::nullopt}};
  const SyntheticSource source(options);
  CollateOptions too_big;
  too_big.pad_values = {{"v", 300.0}};
  EXPECT_THROW(CollateStage(source.fields(), too_big, 16), Error);
  CollateOptions fixed;
  fixed.pad_values = {{"f", 1.0}};
  EXPECT_THROW(CollateStage(source.fields(), fixed, 16), Error);
  EXPECT_THROW(CollateStage(source.fields(), CollateOptions{}, 24), Error);
  const std::vector<FieldSpec> wide{FieldSpec{"z", at::kComplexDouble, {2}, std::nullopt, "raw"}};
  EXPECT_THROW(CollateStage(wide, CollateOptions{}, 16), Error);  // 16-byte elements
}

}  // namespace
}  // namespace ferry
