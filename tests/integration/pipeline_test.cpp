#include <atomic>
#include <chrono>
#include <future>
#include <numeric>
#include <random>
#include <thread>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <oneapi/tbb/global_control.h>

#include <ferry/io/samplers/sequential_sampler.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/error.h>
#include <ferry/stages/standard_pipeline.h>
#include "tests/support/instrumented_source.h"
#include "tests/support/pipeline_checks.h"
#include "tests/support/random_options.h"
#include "tests/support/reference_batch.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::InstrumentedSource;

SyntheticOptions mixed_fields(uint64_t samples) {
  SyntheticOptions options;
  options.seed = 42;
  options.samples = samples;
  options.fields = {
      SyntheticField{"image", at::kByte, {3, 8, 8}, false, 0, 0, std::nullopt},
      SyntheticField{"label", at::kLong, {}, false, 0, 0, std::pair{0.0, 10.0}},
      SyntheticField{"tokens", at::kInt, {}, true, 0, 40, std::nullopt},
      SyntheticField{"emb", at::kBFloat16, {5}, true, 1, 9, std::nullopt},
  };
  return options;
}

struct Concurrency {
  size_t decode_threads;
  size_t prefetch;
};

class PipelineOrder : public ::testing::TestWithParam<Concurrency> {};

// Decodes finish out of order (random per-sample delays); batches must still come in the
// sampler's order, each sample in its place, every byte right.
TEST_P(PipelineOrder, DeliversEveryBatchInSamplerOrderWhateverTheDecodeConcurrency) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(150));
  auto source = std::make_shared<const InstrumentedSource>(truth, std::nullopt, 300us);
  PipelineOptions options;
  options.batch_size = 7;
  options.epochs = 2;
  options.decode_threads = GetParam().decode_threads;
  options.prefetch = GetParam().prefetch;
  EXPECT_EQ(testing::expect_pipeline_delivers_source(source, *truth, options), 44u);
}

INSTANTIATE_TEST_SUITE_P(DecodeThreads, PipelineOrder,
                         ::testing::Values(Concurrency{1, 1}, Concurrency{1, 3}, Concurrency{2, 2}, Concurrency{3, 3},
                                           Concurrency{4, 1}, Concurrency{4, 6}, Concurrency{8, 3}, Concurrency{12, 4},
                                           Concurrency{16, 2}, Concurrency{16, 8}),
                         [](const auto& param_info) {
                           return "threads" + std::to_string(param_info.param.decode_threads) + "_prefetch" +
                                  std::to_string(param_info.param.prefetch);
                         });

// 20 random datasets x 100 batches: random dtypes, ranks, sizes (empty ones too), variable lengths,
// batch sizes, thread counts and prefetch depths. Every byte of every batch is checked.
TEST(Pipeline, TwoThousandRandomBatchesMatchTheSourceByteForByte) {
  std::mt19937_64 rng(0xfe77);
  uint64_t batches = 0;
  for (int round = 0; round < 20; ++round) {
    PipelineOptions options;
    options.batch_size = 1 + rng() % 12;
    options.decode_threads = 1 + rng() % 6;
    options.prefetch = 1 + rng() % 5;
    options.transfer.min_alignment = size_t{16} << (rng() % 3);
    options.transfer.max_chunk_bytes = 4096 << (rng() % 4);
    options.transfer.parallel_pack_bytes = rng() % 2 == 0 ? 1 : size_t{1} << 20;
    auto truth = std::make_shared<const SyntheticSource>(
        testing::random_synthetic_options(rng, options.batch_size * 100 - rng() % options.batch_size));
    SCOPED_TRACE("round " + std::to_string(round));
    batches += testing::expect_pipeline_delivers_source(truth, *truth, options);
  }
  EXPECT_EQ(batches, 2000u);
}

// Batches of hundreds of fields (Note [wide batches]): decode, collate, pack and the views spread over
// the threads; every byte of every batch is checked, at 1 to 8 decode threads.
TEST(Pipeline, WideBatchesMatchTheSourceByteForByte) {
  std::mt19937_64 rng(0x91de);
  for (size_t threads : {1, 2, 4, 8}) {
    PipelineOptions options;
    options.batch_size = 1 + rng() % 4;
    options.decode_threads = threads;
    options.prefetch = 1 + rng() % 4;
    options.transfer.parallel_pack_bytes = rng() % 2 == 0 ? 1 : size_t{1} << 20;
    const auto fields = static_cast<int64_t>(250 + rng() % 500);
    auto truth = std::make_shared<const SyntheticSource>(
        testing::random_synthetic_options(rng, options.batch_size * 12 - rng() % options.batch_size, fields, fields));
    SCOPED_TRACE(std::to_string(threads) + " threads, " + std::to_string(fields) + " fields");
    EXPECT_EQ(testing::expect_pipeline_delivers_source(truth, *truth, options), 12u);
  }
}

TEST(Pipeline, HonoursEpochsDropLastAndMaxBatches) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(10));
  PipelineOptions options;
  options.batch_size = 4;
  options.drop_last = true;
  options.epochs = 3;
  EXPECT_EQ(testing::expect_pipeline_delivers_source(truth, *truth, options), 6u);
  options.drop_last = false;
  options.max_batches = 5;
  EXPECT_EQ(testing::expect_pipeline_delivers_source(truth, *truth, options), 5u);
}

TEST(Pipeline, AnEmptySourceEndsAtOnce) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(0));
  PipelineOptions options;
  options.device = "cpu";
  Pipeline pipeline = make_pipeline(truth, options);
  EXPECT_FALSE(pipeline.next());
  EXPECT_FALSE(pipeline.next());
}

TEST(Pipeline, DecodeFailureArrivesAfterEarlierBatchesNamingItsSample) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(100));
  for (uint64_t failing : {0ull, 1ull, 37ull, 99ull}) {
    auto source = std::make_shared<const InstrumentedSource>(truth, failing, 200us);
    PipelineOptions options;
    options.batch_size = 4;
    options.decode_threads = 4;
    Pipeline pipeline = make_pipeline(source, options);
    const testing::RunToError run = testing::run_to_error(pipeline, *truth);
    ASSERT_TRUE(run.error) << "no error for sample " << failing;
    const Error& e = *run.error;
    EXPECT_EQ(e.stage(), "decode");
    EXPECT_EQ(e.sample_index(), failing);
    EXPECT_EQ(e.batch_index(), failing / 4);
    EXPECT_EQ(e.epoch(), 0u);
    EXPECT_NE(std::string(e.what()).find("planted failure reading sample " + std::to_string(failing)),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("decode failed on sample " + std::to_string(failing)), std::string::npos)
        << e.what();
    EXPECT_EQ(run.batches, failing / 4) << "every batch before the failing one is delivered, none after";
    EXPECT_THROW(pipeline.next(), Error) << "the error is sticky";
  }
}

class ThrowingSampler : public Sampler {
 public:
  explicit ThrowingSampler(bool standard = true) : standard_(standard) {}
  uint64_t epoch_size() const override { return 50; }
  uint64_t index(uint64_t, uint64_t position) const override {
    if (position == 21) {
      if (standard_) throw std::runtime_error("sampler broke at position 21");
      throw 21;  // not even a std::exception
    }
    return position;
  }
  std::string describe() const override { return "throwing"; }

 private:
  bool standard_;
};

// Whatever the sampler throws, a std::exception or anything else, arrives after the batches
// planned before it, as a source error.
TEST(Pipeline, SamplerFailureArrivesInOrderAsASourceError) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(50));
  for (bool standard : {true, false}) {
    PipelineOptions options;
    options.batch_size = 5;
    Pipeline pipeline = make_pipeline(truth, options, std::make_shared<ThrowingSampler>(standard));
    uint64_t delivered = 0;
    try {
      while (pipeline.next()) ++delivered;
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.stage(), "source");
      const std::string expected = standard ? "sampler broke at position 21" : "unknown exception";
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
    EXPECT_EQ(delivered, 4u);
  }
}

TEST(Pipeline, RefusesToStartWhenOneTbbMayRunNoWorker) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(10));
  tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
  try {
    make_pipeline(truth, PipelineOptions{});
    FAIL() << "a pipeline started without worker threads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("limited to one thread"), std::string::npos) << e.what();
  }
}

TEST(Pipeline, ABatchTooLargeForItsSlabFailsInPackNamingTheBatch) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(64));
  PipelineOptions options;
  options.batch_size = 8;
  options.pool.slab_bytes = 2000;  // the images alone need 1536 bytes; long token rows overflow
  Pipeline pipeline = make_pipeline(truth, options);
  try {
    while (pipeline.next()) {
    }
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.stage(), "pack");
    EXPECT_TRUE(e.batch_index().has_value());
    EXPECT_NE(std::string(e.what()).find("raise pool.slab_bytes"), std::string::npos) << e.what();
  }
}

TEST(Pipeline, CloseWakesAConsumerBlockedOnAnotherThread) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(100));
  auto slow = std::make_shared<const InstrumentedSource>(truth, std::nullopt, 300ms);
  PipelineOptions options;
  options.batch_size = 16;
  options.decode_threads = 2;
  Pipeline pipeline = make_pipeline(slow, options);
  auto consumer = std::async(std::launch::async, [&] { return pipeline.next(); });
  EXPECT_EQ(consumer.wait_for(50ms), std::future_status::timeout);  // blocked: decode is slow
  const auto start = std::chrono::steady_clock::now();
  pipeline.close();
  ASSERT_EQ(consumer.wait_for(2s), std::future_status::ready);
  EXPECT_FALSE(consumer.get());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_FALSE(pipeline.next());
}

// next_for: a consumer that polls (as the Python binding will, checking for Ctrl-C between calls)
// gets timeouts while decode is slow, then every batch in order, byte for byte, then the end, which
// is not a timeout; a wait taken up again counts once in the stats; close() ends a polling consumer.
TEST(Pipeline, NextForTimesOutWhileDecodeIsSlowThenDeliversEveryBatch) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(48));
  auto slow = std::make_shared<const InstrumentedSource>(truth, std::nullopt, 20ms);
  PipelineOptions options;
  options.batch_size = 8;
  options.decode_threads = 2;
  options.prefetch = 2;
  Pipeline pipeline = make_pipeline(slow, options);
  std::vector<uint64_t> delivered;
  uint64_t timeouts = 0;
  uint64_t batches = 0;
  while (true) {
    const Pipeline::Next next = pipeline.next_for(1ms);
    if (next.timed_out) {
      ASSERT_FALSE(next.batch.has_value());
      ASSERT_LT(++timeouts, 1000000u) << "never delivered";
      continue;
    }
    if (!next.batch) break;
    EXPECT_EQ(testing::compare_with_reference(*next.batch, *truth), "");
    delivered.insert(delivered.end(), next.batch->sample_indices().begin(), next.batch->sample_indices().end());
    ++batches;
  }
  EXPECT_GT(timeouts, 0u) << "decode was never slow enough to time out: the test proves nothing";
  std::vector<uint64_t> all(48);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(delivered, all);
  EXPECT_EQ(batches, 6u);
  EXPECT_LE(pipeline.stats().consumer_waits, batches + 1) << "each timed-out poll was counted as a wait";
  const Pipeline::Next after_end = pipeline.next_for(1ms);
  EXPECT_FALSE(after_end.batch.has_value());
  EXPECT_FALSE(after_end.timed_out);

  auto slower = std::make_shared<const InstrumentedSource>(truth, std::nullopt, 300ms);
  Pipeline closing = make_pipeline(slower, options);
  EXPECT_TRUE(closing.next_for(1ms).timed_out);
  closing.close();
  const Pipeline::Next closed = closing.next_for(1s);
  EXPECT_FALSE(closed.batch.has_value());
  EXPECT_FALSE(closed.timed_out);
}

TEST(Pipeline, ExplainsWhyADeviceCannotBeUsed) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(10));
  PipelineOptions options;
  options.device = gpu_build() ? "cuda:99" : "cuda";
  try {
    make_pipeline(truth, options);
    FAIL() << "device " << options.device << " accepted";
  } catch (const Error& e) {
    const std::string expected = gpu_build() ? (cuda_device_count() > 0 ? "does not exist" : "no CUDA device")
                                             : "needs GPU support, but this is a CPU build";
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  options.device = "tpu";
  EXPECT_THROW(make_pipeline(truth, options), Error);
}

TEST(Pipeline, RejectsBadOptionsBeforeStarting) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(10));
  PipelineOptions options;
  options.prefetch = 4;
  options.pool.slab_count = 2;
  try {
    make_pipeline(truth, options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid option pool.slab_count: expected at least prefetch (4) slabs"),
              std::string::npos)
        << e.what();
  }
  options = PipelineOptions{};
  options.batch_size = 0;
  EXPECT_THROW(make_pipeline(truth, options), Error);

  // A variable field with no maximum: the slab size cannot be derived.
  class NoMaximum : public Source {
   public:
    explicit NoMaximum(std::shared_ptr<const SyntheticSource> inner)
        : inner_(std::move(inner)), specs_(inner_->fields()) {
      specs_[2].max_length.reset();
    }
    const std::vector<FieldSpec>& fields() const override { return specs_; }
    uint64_t size() const override { return inner_->size(); }
    EncodedSample read(uint64_t index) const override { return inner_->read(index); }
    std::string describe() const override { return "no-maximum"; }

   private:
    std::shared_ptr<const SyntheticSource> inner_;
    std::vector<FieldSpec> specs_;
  };
  try {
    make_pipeline(std::make_shared<NoMaximum>(truth), PipelineOptions{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pool.slab_bytes must be set: field 'tokens'"), std::string::npos) << e.what();
  }
}

TEST(Pipeline, StatsCountWhatTheConsumerReceived) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(40));
  PipelineOptions options;
  options.batch_size = 8;
  Pipeline pipeline = make_pipeline(truth, options);
  uint64_t bytes = 0;
  for (const Batch& batch : pipeline) bytes += batch.nbytes();
  const PipelineStats stats = pipeline.stats();
  EXPECT_EQ(stats.batches, 5u);
  EXPECT_EQ(stats.samples, 40u);
  EXPECT_EQ(stats.bytes, bytes);
  ASSERT_EQ(stats.stages.size(), 5u);
  EXPECT_EQ(stats.stages[0].name, "decode");
  EXPECT_EQ(stats.stages[0].items, 40u);
  for (size_t i = 1; i < stats.stages.size(); ++i) EXPECT_EQ(stats.stages[i].items, 5u) << stats.stages[i].name;
  EXPECT_EQ(stats.pool.leases, 5u);
  EXPECT_EQ(stats.pool.slab_count, options.prefetch);
  EXPECT_LE(stats.ready_queue_peak, options.prefetch);
  EXPECT_GT(stats.elapsed_seconds, 0.0);
}

// Decoded samples travel in groups (Note [sample groups]); each must be freed once its batch is packed.
// A source whose tensors count themselves: while batches flow, no more are alive than the samples in
// flight can hold, and none is once the pipeline is gone. (A group that owned pointers to itself once
// kept every decoded sample of a run alive.)
class CountedSource : public Source {
 public:
  explicit CountedSource(std::shared_ptr<std::atomic<int64_t>> live) : live_(std::move(live)) {
    specs_.push_back(FieldSpec{"x", at::kInt, {16}, std::nullopt, "raw"});
  }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  uint64_t size() const override { return 100'000; }
  EncodedSample read(uint64_t index) const override {
    auto* values = new int32_t[16];
    std::fill(values, values + 16, static_cast<int32_t>(index));
    live_->fetch_add(1);
    at::Tensor tensor = at::from_blob(
        values, {16},
        [live = live_](void* data) {
          delete[] static_cast<int32_t*>(data);
          live->fetch_sub(1);
        },
        at::kInt);
    return EncodedSample{index, {}, {tensor}};
  }
  std::string describe() const override { return "counted"; }

 private:
  std::vector<FieldSpec> specs_;
  std::shared_ptr<std::atomic<int64_t>> live_;
};

TEST(Pipeline, DecodedSamplesAreFreedOnceTheirBatchIsPacked) {
  for (const auto& [threads, prefetch] :
       std::vector<std::pair<size_t, size_t>>{{1, 4}, {2, 4}, {4, 4}, {8, 4}, {4, 16}}) {
    auto live = std::make_shared<std::atomic<int64_t>>(0);
    PipelineOptions options;
    options.batch_size = 32;
    options.prefetch = prefetch;
    options.decode_threads = threads;
    options.max_batches = 600;
    {
      Pipeline pipeline = make_pipeline(std::make_shared<CountedSource>(live), options);
      uint64_t batches = 0;
      for (const Batch& batch : pipeline) {
        // Planned and not yet packed: at most prefetch batches' samples (a sample counts until pack
        // is done with it, and the plan after the tokens may be read already), and the batches' that
        // pack has handed on to be freed: max(2, prefetch / 2) at most (Note [releasing samples]).
        const size_t releasing = std::max<size_t>(2, options.prefetch / 2);
        EXPECT_LE(live->load(), static_cast<int64_t>((options.prefetch + 1 + releasing) * options.batch_size))
            << threads << " threads, batch " << batches;
        EXPECT_EQ(batch["x"][0][0].item<int32_t>(), static_cast<int32_t>(batch.sample_indices()[0]));
        ++batches;
      }
      EXPECT_EQ(batches, 600u);
    }
    EXPECT_EQ(live->load(), 0) << threads << " threads";
  }
}

// More decode threads than samples that can be in flight (prefetch x batch_size) could never all be
// busy: the pipeline runs that many, and says so. (1024 threads on a small run took seconds to start
// and stop, on threads that had nothing to do.)
TEST(Pipeline, RunsNoMoreDecodeThreadsThanSamplesInFlight) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(40));
  PipelineOptions options;
  options.batch_size = 4;
  options.prefetch = 2;
  options.decode_threads = 1024;
  EXPECT_EQ(options.resolved_decode_threads(), 8u);
  Pipeline pipeline = make_pipeline(truth, options);
  uint64_t batches = 0;
  for (const Batch& batch : pipeline) {
    EXPECT_EQ(testing::compare_with_reference(batch, *truth), "");
    ++batches;
  }
  EXPECT_EQ(batches, 10u);
  EXPECT_EQ(pipeline.stats().decode_threads, 8u);
  options.decode_threads = 3;
  EXPECT_EQ(options.resolved_decode_threads(), 3u);
  // auto shares the machine's spare hardware threads among the job's processes on it (LOCAL_WORLD_SIZE);
  // a number given is taken as it is.
  options.prefetch = 1024;
  options.decode_threads = 0;
  const size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t spare = hardware > 2 ? hardware - 2 : 1;
  EXPECT_EQ(options.resolved_decode_threads(), spare);
  options.local_processes = 4;
  EXPECT_EQ(options.resolved_decode_threads(), std::max<size_t>(1, spare / 4));
  options.decode_threads = 3;
  EXPECT_EQ(options.resolved_decode_threads(), 3u);
}

TEST(Pipeline, IsMovableWhileRunning) {
  auto truth = std::make_shared<const SyntheticSource>(mixed_fields(30));
  PipelineOptions options;
  options.batch_size = 3;
  Pipeline first = make_pipeline(truth, options);
  ASSERT_TRUE(first.next());
  Pipeline second = std::move(first);
  uint64_t rest = 0;
  for (const Batch& batch : second) {
    EXPECT_EQ(testing::compare_with_reference(batch, *truth), "");
    ++rest;
  }
  EXPECT_EQ(rest, 9u);
}

}  // namespace
}  // namespace ferry
