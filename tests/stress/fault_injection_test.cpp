// Faults where reality puts them (Note [fault injection]), at random moments and every thread
// count: a source read that fails, a decoder that throws or returns the wrong shape, the staging
// allocation at start, a transfer copy, a consumer that stops or throws. Each must surface with
// its identity, or be skipped and counted under on_error: skip; every batch delivered before it is
// right byte for byte; nothing hangs (CTest's timeout); and every slab is back in its pool once the
// pipeline is gone. A batch stage's work ahead that fails surfaces at its own turn.
#include <atomic>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/io/decoders/raw_decoder.h>
#include <ferry/pipeline/fault_injection.h>
#include <ferry/stages/standard_pipeline.h>
#include <ferry/stages/standard_stages.h>
#include "tests/support/instrumented_source.h"
#include "tests/support/random_options.h"
#include "tests/support/reference_batch.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

// The decoders take their victims by the first byte of the "probe" field: the samples whose probe
// byte equals g_poison fail. Tests set it per round, and compute which samples that hits.
std::atomic<int> g_poison{-1};

bool poisoned(const at::Tensor& encoded) {
  return encoded.numel() > 0 && encoded.data_ptr<uint8_t>()[0] == g_poison.load();
}

class ThrowingDecoder : public Decoder {
 public:
  std::string_view name() const override { return "fault-throws"; }
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override {
    if (poisoned(encoded)) throw std::runtime_error("planted decoder failure");
    return raw_.decode(encoded, spec);
  }

 private:
  RawDecoder raw_;
};

class WrongShapeDecoder : public Decoder {
 public:
  std::string_view name() const override { return "fault-wrong-shape"; }
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override {
    const at::Tensor decoded = raw_.decode(encoded, spec);
    return poisoned(encoded) ? decoded.repeat({2}) : decoded;  // twice the elements it should have
  }

 private:
  RawDecoder raw_;
};

void register_decoders() {
  static const bool registered = [] {
    DecoderRegistry::global().add(std::make_shared<ThrowingDecoder>());
    DecoderRegistry::global().add(std::make_shared<WrongShapeDecoder>());
    return true;
  }();
  (void)registered;
}

enum class Kind {
  kReadFails,
  kDecoderThrows,
  kWrongShape,
  kTransferCopy,
  kStagingAllocation,
  kConsumerStops,
  kConsumerThrows
};
constexpr Kind kKinds[] = {Kind::kReadFails,         Kind::kDecoderThrows, Kind::kWrongShape,    Kind::kTransferCopy,
                           Kind::kStagingAllocation, Kind::kConsumerStops, Kind::kConsumerThrows};

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kReadFails: return "a source read fails";
    case Kind::kDecoderThrows: return "a decoder throws";
    case Kind::kWrongShape: return "a decoder returns the wrong shape";
    case Kind::kTransferCopy: return "a transfer copy fails";
    case Kind::kStagingAllocation: return "the staging allocation fails";
    case Kind::kConsumerStops: return "the consumer stops";
    case Kind::kConsumerThrows: return "the consumer throws";
  }
  return "?";
}

// A random dataset behind a uint8 "probe" field whose first byte picks the decoders' victims.
SyntheticOptions dataset(std::mt19937_64& rng, uint64_t samples) {
  SyntheticOptions options = testing::random_synthetic_options(rng, samples);
  options.fields.insert(options.fields.begin(), SyntheticField{"probe", at::kByte, {2}, false, 0, 0, std::nullopt});
  for (size_t f = 1; f < options.fields.size(); ++f) options.fields[f].name = "f" + std::to_string(f);
  return options;
}

struct Tally {
  uint64_t rounds = 0, surfaced = 0, skipped_and_counted = 0, stopped = 0, refused_at_start = 0, completed = 0;
};

// One round: builds the pipeline, plants the fault, runs it as the kind says, checks the outcome,
// then that every slab came back.
void run_round(std::mt19937_64& rng, size_t threads, Kind kind, Tally& tally) {
  const uint64_t samples = 40 + rng() % 300;
  auto truth = std::make_shared<const SyntheticSource>(dataset(rng, samples));
  PipelineOptions options;
  options.device = "cpu";
  options.batch_size = 1 + rng() % 12;
  options.decode_threads = threads;
  options.prefetch = 1 + rng() % 4;
  const bool skip = rng() % 2 == 0;
  options.on_error = skip ? OnError::kSkip : OnError::kFail;
  const uint64_t batches = (samples + options.batch_size - 1) / options.batch_size;

  // The samples a data fault hits, in sampler (sequential) order.
  std::set<uint64_t> failing;
  if (kind == Kind::kReadFails) {
    for (int n = 0; n < 1 + static_cast<int>(rng() % 3); ++n) failing.insert(rng() % samples);
  } else if (kind == Kind::kDecoderThrows || kind == Kind::kWrongShape) {
    g_poison = static_cast<int>(truth->read(rng() % samples).fields[0].data_ptr<uint8_t>()[0]);
    for (uint64_t i = 0; i < samples; ++i) {
      if (truth->read(i).fields[0].data_ptr<uint8_t>()[0] == g_poison.load()) failing.insert(i);
    }
    options.decoders = {{"probe", kind == Kind::kDecoderThrows ? "fault-throws" : "fault-wrong-shape"}};
  }
  auto source = std::make_shared<const testing::InstrumentedSource>(
      truth, kind == Kind::kReadFails ? failing : std::set<uint64_t>{}, std::chrono::microseconds(rng() % 200));
  SCOPED_TRACE(std::string(kind_name(kind)) + ", " + std::to_string(threads) + " threads, batch_size " +
               std::to_string(options.batch_size) + ", prefetch " + std::to_string(options.prefetch) +
               (skip ? ", on_error skip" : ", on_error fail") + ", " + std::to_string(failing.size()) +
               " failing samples");
  ++tally.rounds;

  FaultInjector::reset();
  if (kind == Kind::kStagingAllocation) {
    FaultInjector::arm(Fault::kStagingAllocation, 0);
    PipelineOptions resolved = options;
    try {
      (void)make_standard_stages(source, resolved);
      ADD_FAILURE() << "the pipeline started without its staging memory";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos) << e.what();
      ++tally.refused_at_start;
    }
    FaultInjector::reset();
    return;
  }
  const uint64_t copy_fails_at = rng() % batches;
  if (kind == Kind::kTransferCopy) FaultInjector::arm(Fault::kTransferCopy, copy_fails_at);

  StageSet stages = make_standard_stages(source, options);
  std::shared_ptr<PinnedPool> pool = stages.pool;
  auto pipeline = std::make_unique<Pipeline>(pipeline_from_stages(std::move(stages), options));
  const uint64_t consumer_stops_after = rng() % (batches + 1);
  std::vector<uint64_t> delivered;
  uint64_t taken = 0;
  std::optional<Error> error;
  try {
    while (auto batch = pipeline->next()) {
      ASSERT_EQ(testing::compare_with_reference(*batch, *truth), "");
      delivered.insert(delivered.end(), batch->sample_indices().begin(), batch->sample_indices().end());
      ++taken;
      if (kind == Kind::kConsumerStops && taken == consumer_stops_after) break;
      if (kind == Kind::kConsumerThrows && taken == consumer_stops_after) throw std::runtime_error("consumer failed");
    }
  } catch (const Error& e) {
    error = e;
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "consumer failed");
    pipeline.reset();  // what unwinding out of a training loop does
  }
  const PipelineStats stats = pipeline ? pipeline->stats() : PipelineStats{};

  if (kind == Kind::kConsumerStops || kind == Kind::kConsumerThrows) {
    EXPECT_FALSE(error) << error->what();
    EXPECT_EQ(taken, std::min(consumer_stops_after == 0 ? batches : consumer_stops_after, batches));
    ++tally.stopped;
  } else if (kind == Kind::kTransferCopy) {
    ASSERT_TRUE(error) << "the copy of batch " << copy_fails_at << " failed without a word";
    EXPECT_EQ(error->stage(), "h2d") << error->what();
    EXPECT_EQ(error->batch_index(), copy_fails_at) << error->what();
    EXPECT_EQ(taken, copy_fails_at) << "every batch before the failed copy, none after";
    EXPECT_EQ(FaultInjector::fired(Fault::kTransferCopy), 1u);
    ++tally.surfaced;
  } else if (failing.empty()) {
    EXPECT_FALSE(error) << error->what();
    EXPECT_EQ(taken, batches);
    ++tally.completed;
  } else if (skip) {
    EXPECT_FALSE(error) << error->what();
    std::vector<uint64_t> kept;
    for (uint64_t i = 0; i < samples; ++i) {
      if (!failing.count(i)) kept.push_back(i);
    }
    EXPECT_EQ(delivered, kept) << "every other sample, in order";
    EXPECT_EQ(stats.skipped_samples, failing.size());
    for (const SkippedSample& skipped : stats.skipped) EXPECT_TRUE(failing.count(skipped.index)) << skipped.index;
    ++tally.skipped_and_counted;
  } else {
    const uint64_t first = *failing.begin();
    ASSERT_TRUE(error) << "sample " << first << " failed without a word";
    EXPECT_EQ(error->stage(), "decode") << error->what();
    EXPECT_EQ(error->sample_index(), first) << error->what();
    EXPECT_EQ(error->batch_index(), first / options.batch_size) << error->what();
    EXPECT_EQ(taken, first / options.batch_size) << "every batch before the failing one, none after";
    ++tally.surfaced;
  }
  FaultInjector::reset();
  pipeline.reset();
  EXPECT_EQ(pool.use_count(), 1) << "a lease outlived its pipeline";
  EXPECT_EQ(pool->stats().leased_bytes, 0u) << "a slab did not come back";
}

TEST(FaultInjection, EveryFaultAtRandomMomentsAndEveryThreadCountSurfacesOrIsSkippedAndNothingIsLost) {
  register_decoders();
  std::mt19937_64 rng(20261126);
  Tally tally;
  for (const size_t threads : {1, 2, 4, 8}) {
    for (int round = 0; round < 6; ++round) {
      for (const Kind kind : kKinds) {
        run_round(rng, threads, kind, tally);
        if (HasFatalFailure()) return;
      }
    }
  }
  std::cout << "[ measured ] " << tally.rounds << " rounds: " << tally.surfaced << " surfaced with their identity, "
            << tally.skipped_and_counted << " skipped and counted, " << tally.stopped << " consumer stops, "
            << tally.refused_at_start << " refused at start, " << tally.completed << " with no sample hit\n";
}

// A hook costs nothing while disarmed, and an armed one fires exactly on the calls it names.
TEST(FaultInjection, FiresOnTheCallsItIsArmedForThenDisarmsItself) {
  FaultInjector::reset();
  std::vector<int> fired;
  FaultInjector::arm(Fault::kEventQuery, 3, 2);
  for (int call = 0; call < 10; ++call) {
    if (detail::fault_fires(Fault::kEventQuery)) fired.push_back(call);
  }
  EXPECT_EQ(fired, (std::vector<int>{3, 4}));
  EXPECT_EQ(FaultInjector::fired(Fault::kEventQuery), 2u);
  EXPECT_EQ(detail::g_armed_faults.load(), 0u) << "still armed after its last call";
  EXPECT_FALSE(detail::fault_fires(Fault::kTransferCopy));
  FaultInjector::reset();
}

// A batch stage's work ahead (BatchStage::prepare) runs on the node before its own. What it throws
// surfaces at the stage's own turn, naming that stage and the batch, with every batch before it
// delivered whole; a stage whose prepare() does nothing (run() does it all) delivers the same batches.
class WorkAhead : public BatchStage {
 public:
  WorkAhead(std::unique_ptr<BatchStage> inner, bool forward, std::optional<uint64_t> fails_at)
      : inner_(std::move(inner)), forward_(forward), fails_at_(fails_at) {}
  std::string_view name() const override { return inner_->name(); }
  void run(BatchWork& work, const std::atomic<bool>& stop) override { inner_->run(work, stop); }
  void prepare(BatchWork& work) override {
    if (fails_at_ == work.info.index) throw Error("no device buffer for this batch (an injected fault)");
    if (forward_) inner_->prepare(work);
  }

 private:
  std::unique_ptr<BatchStage> inner_;
  bool forward_;
  std::optional<uint64_t> fails_at_;
};

TEST(FaultInjection, WorkAheadThatFailsSurfacesAtItsStagesTurnAndWorkAheadIsOptional) {
  std::mt19937_64 rng(20261130);
  for (int round = 0; round < 12; ++round) {
    const uint64_t samples = 40 + rng() % 200;
    auto truth = std::make_shared<const SyntheticSource>(testing::random_synthetic_options(rng, samples));
    PipelineOptions options;
    options.device = "cpu";
    options.batch_size = 1 + rng() % 12;
    options.decode_threads = 1 + rng() % 4;
    options.prefetch = 1 + rng() % 4;
    const uint64_t batches = (samples + options.batch_size - 1) / options.batch_size;
    const bool fails = round % 2 == 0;
    const uint64_t fails_at = rng() % batches;
    SCOPED_TRACE("round " + std::to_string(round) + (fails ? ", fails at batch " + std::to_string(fails_at) : ""));

    StageSet stages = make_standard_stages(truth, options);
    stages.h2d = std::make_unique<WorkAhead>(std::move(stages.h2d), /*forward=*/round % 3 == 0,
                                             fails ? std::optional<uint64_t>(fails_at) : std::nullopt);
    std::shared_ptr<PinnedPool> pool = stages.pool;
    auto pipeline = std::make_unique<Pipeline>(pipeline_from_stages(std::move(stages), options));
    uint64_t taken = 0;
    std::optional<Error> error;
    try {
      while (auto batch = pipeline->next()) {
        ASSERT_EQ(testing::compare_with_reference(*batch, *truth), "");
        ++taken;
      }
    } catch (const Error& e) {
      error = e;
    }
    if (fails) {
      ASSERT_TRUE(error) << "batch " << fails_at << "'s failed work ahead went unreported";
      EXPECT_EQ(error->stage(), "h2d") << error->what();
      EXPECT_EQ(error->batch_index(), fails_at) << error->what();
      EXPECT_NE(std::string(error->what()).find("injected"), std::string::npos) << error->what();
      EXPECT_EQ(taken, fails_at) << "every batch before the failed one, none after";
    } else {
      EXPECT_FALSE(error) << error->what();
      EXPECT_EQ(taken, batches);
    }
    pipeline.reset();
    EXPECT_EQ(pool.use_count(), 1) << "a lease outlived its pipeline";
    EXPECT_EQ(pool->stats().leased_bytes, 0u) << "a slab did not come back";
  }
}

}  // namespace
}  // namespace ferry
