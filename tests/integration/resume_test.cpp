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
    const SyntheticSource truth(synthetic_options(config.source.keys));
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
  const SyntheticSource truth(synthetic_options(config.source.keys));
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
          .find("next.batch: expected a whole number (a batch of the epoch), found '-2'"),
      std::string::npos);
  EXPECT_NE(problem(R"({"format": "ferry-state", "version": 1, "next_batch": 3, "next": 7, "order": {}})")
                .find("next: expected"),
            std::string::npos);
  // A key missing from `next` is named (it was yaml-cpp's "invalid node; first invalid key"), and so
  // are unknown keys and every key that is not a whole number, all in one error.
  const std::string missing =
      problem(R"({"format": "ferry-state", "version": 1, "next_batch": 3, "next": {"batch": 1, "position": 5},
                  "order": {}})");
  EXPECT_NE(missing.find("s.json:1:"), std::string::npos) << missing;
  EXPECT_NE(missing.find("next.epoch: missing"), std::string::npos) << missing;
  const std::string many = problem(
      R"({"format": "ferry-state", "version": 1, "next_batch": 1.5, "nxt": 1, "next": {"epoch": true, "batch": 0,
          "position": 0, "extra": 1}, "last_delivered": {"epoch": "x"}, "order": {}})");
  for (const char* part : {"next_batch: expected a whole number of batches, found '1.5'", "nxt: unknown key",
                           "next.epoch: expected a whole number", "next.extra: unknown key",
                           "last_delivered.epoch: expected a whole number", "last_delivered.batch: missing"}) {
    EXPECT_NE(many.find(part), std::string::npos) << part << " in " << many;
  }
  EXPECT_NE(problem(R"({"format": "ferry-state", "version": 1, "next_batch": 3, "last_delivered": [1], "order": {}})")
                .find("last_delivered: expected"),
            std::string::npos);
}

// Every state key is checked against the run that would resume it: a hand-edited or mismatched state
// is refused naming the state file and the key, instead of resuming misaligned or delivering nothing.
TEST(Resume, StatesThatDoNotFitTheConfigAreRefusedNamingTheFileAndTheKey) {
  // 230 samples in batches of 16: 15 batches an epoch (the last one of 6), 3 epochs.
  const Config config = parse_config(kConfig, "resume.yaml");
  // The states a real run saves are accepted (the order keys come from the run itself).
  Pipeline pipeline = make_pipeline(config);
  for (int i = 0; i < 17; ++i) (void)pipeline.next();
  PipelineState saved = parse_pipeline_state(pipeline.state().to_json(), "saved.json");
  ASSERT_EQ(*saved.next, (BatchCursor{1, 2, 32}));
  EXPECT_NO_THROW((void)make_pipeline(config, saved));
  const auto with = [&](uint64_t next_batch, BatchCursor next) {
    PipelineState edited = saved;
    edited.next_batch = next_batch;
    edited.next = next;
    edited.consumed.reset();  // taken as next.position x the ranks, as in states saved before it was recorded
    edited.last_epoch.reset();
    edited.last_index.reset();
    return edited;
  };
  const auto refused = [&](const PipelineState& edited) -> std::string {
    try {
      (void)make_pipeline(config, edited);
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.problems().at(0).location, "saved.json") << e.what();
      return e.what();
    }
    return "";
  };
  EXPECT_NO_THROW((void)make_pipeline(config, with(45, {3, 0, 0})));  // a finished run: nothing left
  EXPECT_NE(refused(with(45, {4, 0, 0})).find("next.epoch: 4 is beyond the 3 epochs"), std::string::npos);
  EXPECT_NE(refused(with(45, {3, 1, 16})).find("next.epoch: 3 is the end"), std::string::npos);
  EXPECT_NE(refused(with(17, {1, 2, uint64_t{1} << 63})).find("next.position: 9223372036854775808 is past the 230"),
            std::string::npos);
  EXPECT_NE(refused(with(17, {1, 2, 40})).find("next.position: 40 does not fit next.batch 2"), std::string::npos);
  EXPECT_NE(refused(with(17, {1, 16, 230})).find("next.batch: 16 is past the 15 batches"), std::string::npos);
  EXPECT_NE(refused(with(18, {1, 2, 32})).find("next_batch: 18 does not fit next (epoch 1, batch 2)"),
            std::string::npos);
  EXPECT_NE(refused(with(uint64_t{1} << 63, {1, 2, 32})).find("next_batch: 9223372036854775808 is past the 45"),
            std::string::npos);
  PipelineState old_format = with(46, {});
  old_format.next.reset();
  EXPECT_NE(refused(old_format).find("next_batch: 46 is past the 45 batches"), std::string::npos);
  PipelineState last = saved;
  last.last_index = 0;
  EXPECT_NE(refused(last).find("last_delivered: epoch 1, batch 0 is not the batch before next (epoch 1, batch 2)"),
            std::string::npos);
  // With max_batches, and with on_error: skip, where positions may run ahead of batch x batch_size.
  const Config capped = parse_config(kConfig, "capped.yaml", {"max_batches=20"});
  try {
    (void)make_pipeline(capped, with(21, {1, 6, 96}));
    ADD_FAILURE() << "resumed past max_batches";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("saved.json: next_batch: 21 is past max_batches (20)"), std::string::npos)
        << e.what();
  }
  const Config skipping = parse_config(kConfig, "skip.yaml", {"decode.on_error=skip"});
  PipelineState ahead = with(17, {1, 2, 40});
  ahead.order = make_pipeline(skipping).state().order;
  EXPECT_NO_THROW((void)make_pipeline(skipping, ahead));
  ahead.next = BatchCursor{1, 2, 31};
  EXPECT_THROW((void)make_pipeline(skipping, ahead), ConfigError);
  ahead.next = BatchCursor{1, 2, 40};
  ahead.next_batch = 1;
  EXPECT_THROW((void)make_pipeline(skipping, ahead), ConfigError);
}

// Found by tests/fuzz/pipeline_state_fuzz: a cursor without one of its keys
// escaped as yaml-cpp's "invalid node; first invalid key" instead of a ConfigError naming the file
// and the key.
TEST(Resume, ACursorMissingAKeyIsRefusedNamingIt) {
  const std::pair<const char*, const char*> cases[] = {{R"({"batch": 1, "position": 7})", "next.epoch"},
                                                       {R"({"epoch": 3, "position": 7})", "next.batch"},
                                                       {R"({"epoch": 3, "batch": 1})", "next.position"}};
  for (const auto& [next, key] : cases) {
    const std::string text = std::string(R"({"format": "ferry-state", "version": 1, "next_batch": 4, "next": )") +
                             next + R"(, "order": {}})";
    try {
      (void)parse_pipeline_state(text, "s.json");
      ADD_FAILURE() << "accepted " << text;
    } catch (const ConfigError& e) {
      ASSERT_EQ(e.problems().size(), 1u) << e.what();
      EXPECT_EQ(e.problems()[0].key, key) << e.what();
      EXPECT_EQ(e.problems()[0].location, "s.json:1:66") << e.what();  // the cursor that lacks it
    }
  }
  // last_delivered is checked like the rest: without its batch, the state is refused.
  try {
    (void)parse_pipeline_state(
        R"({"format": "ferry-state", "version": 1, "next_batch": 4, "last_delivered": {"epoch": 0}, "order": {}})",
        "s.json");
    ADD_FAILURE() << "accepted a last_delivered without its batch";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.problems().at(0).key, "last_delivered.batch") << e.what();
  }
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
