// Pipeline::state() and make_pipeline(config, state): a run stopped anywhere and resumed (with other
// thread counts and prefetch) delivers, with the first part, exactly the batches of an uninterrupted
// run — same samples, same bytes.
#include <random>

#include <gtest/gtest.h>

#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/assembly/pipeline_state_loader.h>
#include <ferry/stages/standard_pipeline.h>
#include "tests/support/reference_batch.h"

namespace ferry {
namespace {

constexpr const char* kConfig = R"(
source:
  kind: synthetic
  samples: 230
  seed: 5
  fields:
    - {name: x, dtype: float32, shape: [3]}
    - {name: tokens, dtype: int32, length: [1, 9]}
batch_size: 16
sampler: {shuffle: true, seed: 21, epochs: 3}
transfer: {device: cpu}
)";

struct Delivered {
  uint64_t epoch;
  uint64_t index;
  std::vector<uint64_t> samples;
};

bool operator==(const Delivered& a, const Delivered& b) {
  return a.epoch == b.epoch && a.index == b.index && a.samples == b.samples;
}

// Takes up to `limit` batches (all when 0), checking each one's bytes against the source.
std::vector<Delivered> take(Pipeline& pipeline, const SyntheticSource& truth, size_t limit = 0) {
  std::vector<Delivered> got;
  while (limit == 0 || got.size() < limit) {
    const std::optional<Batch> batch = pipeline.next();
    if (!batch) break;
    EXPECT_EQ(testing::compare_with_reference(*batch, truth), "");
    got.push_back({batch->epoch(), batch->index(), batch->sample_indices()});
  }
  return got;
}

TEST(Resume, StoppedAnywhereAndResumedItDeliversExactlyTheRest) {
  const std::vector<std::string> world = {"sampler.rank=1", "sampler.world_size=3"};
  for (const bool sharded : {false, true}) {
    SCOPED_TRACE(sharded ? "rank 1 of 3" : "one rank");
    const Config config = parse_config(kConfig, "resume.yaml", sharded ? world : std::vector<std::string>{});
    const SyntheticSource truth(config.source.synthetic);
    Pipeline whole = make_pipeline(config);
    const std::vector<Delivered> expected = take(whole, truth);
    ASSERT_GT(expected.size(), 10u);
    EXPECT_EQ(whole.state().next_batch, expected.size());
    std::mt19937_64 random(3);
    for (int round = 0; round < 6; ++round) {
      const size_t stop = round == 0 ? 1 : std::uniform_int_distribution<size_t>(1, expected.size() - 1)(random);
      SCOPED_TRACE("stopped after " + std::to_string(stop));
      Config first_config = config;
      first_config.pipeline.decode_threads = 1 + round % 3;
      first_config.pipeline.prefetch = 1 + round % 4;
      Pipeline first = make_pipeline(first_config);
      std::vector<Delivered> got = take(first, truth, stop);
      // Through the saved text, as --save-state and --resume do.
      const PipelineState state = parse_pipeline_state(first.state().to_json(), "state.json");
      first.close();
      EXPECT_EQ(state.next_batch, stop);
      Config second_config = config;
      second_config.pipeline.decode_threads = 4 - round % 3;
      second_config.pipeline.prefetch = 6;
      Pipeline second = make_pipeline(second_config, state);
      const std::vector<Delivered> rest = take(second, truth);
      got.insert(got.end(), rest.begin(), rest.end());
      EXPECT_TRUE(got == expected);
      EXPECT_EQ(second.state().next_batch, expected.size());
    }
  }
}

// max_batches counts the whole run: a resumed run with the same limit stops where an uninterrupted
// one would.
TEST(Resume, MaxBatchesCountsFromTheStartOfTheRun) {
  const Config config = parse_config(kConfig, "resume.yaml", {"max_batches=30"});
  const SyntheticSource truth(config.source.synthetic);
  Pipeline whole = make_pipeline(config);
  const std::vector<Delivered> expected = take(whole, truth);
  ASSERT_EQ(expected.size(), 30u);
  Pipeline first = make_pipeline(config);
  std::vector<Delivered> got = take(first, truth, 12);
  const PipelineState state = first.state();
  first.close();
  Pipeline second = make_pipeline(config, state);
  const std::vector<Delivered> rest = take(second, truth);
  EXPECT_EQ(rest.size(), 18u);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_TRUE(got == expected);
}

TEST(Resume, AStateTakenBeforeTheFirstBatchStartsAtTheBeginning) {
  const Config config = parse_config(kConfig, "resume.yaml");
  Pipeline pipeline = make_pipeline(config);
  const PipelineState state = pipeline.state();
  EXPECT_EQ(state.next_batch, 0u);
  EXPECT_FALSE(state.last_epoch.has_value());
  EXPECT_EQ(state.order.at("sampler.seed"), "21");
}

TEST(Resume, RefusesAnotherOrderNamingEveryKeyThatDiffers) {
  const Config config = parse_config(kConfig, "resume.yaml");
  Pipeline pipeline = make_pipeline(config);
  (void)pipeline.next();
  const PipelineState state = pipeline.state();
  const Config other = parse_config(kConfig, "other.yaml", {"sampler.seed=22", "batch_size=8", "decode.threads=3"});
  try {
    (void)make_pipeline(other, state);
    FAIL() << "resumed under another order";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 2u) << e.what();  // thread counts are not part of the order
    EXPECT_EQ(e.problems()[0].key, "batch_size");
    EXPECT_EQ(e.problems()[0].location, "--set batch_size=8");
    EXPECT_EQ(e.problems()[1].key, "sampler.seed");
  }
  // More epochs is the same order, continued.
  const Config longer = parse_config(kConfig, "longer.yaml", {"sampler.epochs=5"});
  EXPECT_NO_THROW((void)make_pipeline(longer, state));
  // A key only the saved run recorded (a setting this config leaves at its default) differs too.
  PipelineState extra = state;
  extra.order["sampler.shuffle_buffer"] = "100";
  try {
    (void)make_pipeline(config, extra);
    FAIL() << "resumed without the saved run's shuffle buffer";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u) << e.what();
    EXPECT_EQ(e.problems()[0].key, "sampler.shuffle_buffer");
    EXPECT_NE(e.problems()[0].message.find("with '100', this config has '(not set)'"), std::string::npos) << e.what();
  }
}

TEST(Resume, MalformedStatesAreRefusedWithTheirPlace) {
  const auto problem = [](const std::string& text) -> std::string {
    try {
      (void)parse_pipeline_state(text, "s.json");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(problem("{").find("s.json:"), std::string::npos);
  EXPECT_NE(problem("[1, 2]").find("not a saved pipeline state"), std::string::npos);
  EXPECT_NE(
      problem(R"({"format": "ferry-state", "version": 2, "next_batch": 1, "order": {}})").find("version: expected 1"),
      std::string::npos);
  EXPECT_NE(problem(R"({"format": "ferry-state", "version": 1, "next_batch": -1, "order": {}})")
                .find("next_batch: expected a whole number"),
            std::string::npos);
  EXPECT_NE(problem(R"({"format": "ferry-state", "version": 1, "next_batch": 3})").find("order: expected a mapping"),
            std::string::npos);
  EXPECT_EQ(problem(R"({"format": "ferry-state", "version": 1, "next_batch": 3, "order": {"a": "b"}})"), "");
  EXPECT_NE(
      problem(
          R"({"format": "ferry-state", "version": 1, "next_batch": 3, "next": {"epoch": 1, "batch": -2, "position": 5}, "order": {}})")
          .find("next: expected {\"epoch\": N, \"batch\": N, \"position\": N}"),
      std::string::npos);
  EXPECT_NE(problem(R"({"format": "ferry-state", "version": 1, "next_batch": 3, "next": 7, "order": {}})")
                .find("next: expected"),
            std::string::npos);
}

// Found by tests/fuzz/pipeline_state_fuzz: a cursor without one of its keys escaped as yaml-cpp's
// "invalid node; first invalid key" instead of a ConfigError naming the file and the key.
TEST(Resume, ACursorMissingAKeyIsRefusedNamingIt) {
  for (const char* next :
       {R"({"batch": 1, "position": 7})", R"({"epoch": 3, "position": 7})", R"({"epoch": 3, "batch": 1})"}) {
    const std::string text = std::string(R"({"format": "ferry-state", "version": 1, "next_batch": 4, "next": )") +
                             next + R"(, "order": {}})";
    try {
      (void)parse_pipeline_state(text, "s.json");
      ADD_FAILURE() << "accepted " << text;
    } catch (const ConfigError& e) {
      ASSERT_EQ(e.problems().size(), 1u) << e.what();
      EXPECT_EQ(e.problems()[0].key, "next") << e.what();
      EXPECT_EQ(e.problems()[0].location, "s.json:1:66") << e.what();
    }
  }
  // last_delivered is for people reading the file: without its batch it is left out, not an error.
  const PipelineState state = parse_pipeline_state(
      R"({"format": "ferry-state", "version": 1, "next_batch": 4, "last_delivered": {"epoch": 0}, "order": {}})",
      "s.json");
  EXPECT_EQ(state.last_epoch, std::optional<uint64_t>(0));
  EXPECT_FALSE(state.last_index.has_value());
}

// The cursor survives the round trip through JSON; a state without one (an older file) has none.
TEST(Resume, TheCursorRoundTripsThroughJson) {
  PipelineState state;
  state.next_batch = 12;
  state.next = BatchCursor{2, 3, 17};
  state.last_epoch = 2;
  state.last_index = 2;
  state.order = {{"batch_size", "5"}, {"odd \"key\"", "a\\b"}};
  const PipelineState back = parse_pipeline_state(state.to_json(), "s.json");
  EXPECT_EQ(back.next_batch, 12u);
  ASSERT_TRUE(back.next.has_value());
  EXPECT_EQ(*back.next, (BatchCursor{2, 3, 17}));
  EXPECT_EQ(back.last_epoch, std::optional<uint64_t>(2));
  EXPECT_EQ(back.order, state.order);
  EXPECT_FALSE(
      parse_pipeline_state(R"({"format": "ferry-state", "version": 1, "next_batch": 3, "order": {}})", "s.json").next);
}

}  // namespace
}  // namespace ferry
