// One process feeding several devices (transfer.devices, PipelineGroup): each step gives every device its
// batch_size share of the next N x batch_size samples, as N data-parallel ranks would get them, every
// byte the source's; the devices stay in step, a saved group state resumes exactly in a new group, a
// failure stops every device at the same step, and devices out of step are reported, not hidden.
//
// The devices here are all `cpu` (this machine may have no GPU): a group's pipelines differ only in
// where their copies land, which tests/cuda/pipeline_group_cuda_test.cpp covers.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/assembly/config.h>
#include <ferry/assembly/config_error.h>
#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/assembly/pipeline_state_loader.h>
#include <ferry/io/samplers/sequential_sampler.h>
#include <ferry/io/samplers/sharded_sampler.h>
#include <ferry/io/samplers/shuffled_sampler.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/pipeline_group.h>
#include <ferry/stages/standard_pipeline.h>
#include <ferry/stages/standard_stages.h>
#include "tests/support/instrumented_source.h"
#include "tests/support/random_options.h"
#include "tests/support/reference_batch.h"

namespace ferry {
namespace {

uint64_t test_seed() {
  const char* text = std::getenv("FERRY_TEST_SEED");
  return text != nullptr ? std::strtoull(text, nullptr, 0) : 0x9209ULL;
}

// torchrun's variables would make every config here a rank of a job: the suite may run under torchrun.
void forget_torchrun() {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) ::unsetenv(name);
}

std::string devices_yaml(size_t devices) {
  std::string list;
  for (size_t d = 0; d < devices; ++d) list += d == 0 ? "cpu" : ", cpu";
  return "[" + list + "]";
}

std::string source_yaml(const SyntheticOptions& data) {
  std::string yaml = "source:\n  kind: synthetic\n  samples: " + std::to_string(data.samples) +
                     "\n  seed: " + std::to_string(data.seed) + "\n  fields:\n";
  yaml += "    - {name: id, dtype: int64, shape: [2]}\n";
  yaml += "    - {name: tokens, dtype: int32, shape: [], length: [1, 9], range: [-1000, 1000]}\n";
  yaml += "    - {name: w, dtype: bfloat16, shape: [3]}\n";
  return yaml;
}

// The fields source_yaml() writes: rows told apart by `id`, and a variable-length field for padding.
SyntheticOptions dataset(uint64_t samples, uint64_t seed) {
  SyntheticOptions options;
  options.seed = seed;
  options.samples = samples;
  options.fields = {
      SyntheticField{"id", at::kLong, {2}, false, 0, 0, std::nullopt},
      SyntheticField{"tokens", at::kInt, {}, true, 1, 9, std::pair{-1000.0, 1000.0}},
      SyntheticField{"w", at::kBFloat16, {3}, false, 0, 0, std::nullopt},
  };
  return options;
}

// Device `device` of `devices`' part of a group over `source`: options as given (on the CPU), the samples
// of rank `device` of `devices`, as the config layer shards them.
PipelinePart sharded_part(std::shared_ptr<const Source> source, PipelineOptions options, size_t device,
                          size_t devices) {
  options.device = "cpu";
  options.skip_replaces = true;
  auto sampler = std::make_shared<ShardedSampler>(std::make_shared<SequentialSampler>(source->size()), device, devices,
                                                  ShardedSampler::Remainder::kPad);
  PipelinePart part;
  part.stages = make_standard_stages(std::move(source), options, sampler);
  part.options = options;
  return part;
}

// What one device was handed: each of its batches' sample indices, in order.
using DeviceRun = std::vector<std::vector<uint64_t>>;

// Takes up to `steps` steps (all: 0) from `group`, checking each: one batch per device, all of the same
// epoch and index, every byte what `truth` makes for the samples the batch says it holds.
std::vector<DeviceRun> take(PipelineGroup& group, const SyntheticSource& truth, uint64_t steps = 0) {
  std::vector<DeviceRun> runs(group.size());
  for (uint64_t taken = 0; steps == 0 || taken < steps; ++taken) {
    const std::optional<BatchGroup> step = group.next();
    if (!step) break;
    EXPECT_EQ(step->size(), group.size());
    for (size_t d = 0; d < step->size(); ++d) {
      const Batch& batch = (*step)[d];
      EXPECT_EQ(batch.epoch(), step->epoch()) << "device " << d;
      EXPECT_EQ(batch.index(), step->index()) << "device " << d;
      const std::string problem = testing::compare_with_reference(batch, truth, CollateOptions{});
      if (!problem.empty()) {
        ADD_FAILURE() << "device " << d << ": " << problem;
        return runs;
      }
      runs[d].push_back(batch.sample_indices());
    }
  }
  return runs;
}

// The order a single pipeline of the same config delivers: what N devices share, step by step.
std::vector<std::vector<uint64_t>> epoch_orders(const std::string& yaml, uint64_t epochs) {
  Pipeline whole = make_pipeline(parse_config(yaml, "<test>", {"transfer.device=cpu"}));
  std::vector<std::vector<uint64_t>> orders(epochs);
  for (const Batch& batch : whole) {
    orders[batch.epoch()].insert(orders[batch.epoch()].end(), batch.sample_indices().begin(),
                                 batch.sample_indices().end());
  }
  return orders;
}

TEST(PipelineGroup, EachStepGivesEveryDeviceItsShareOfTheNextSamplesEveryByteTheSources) {
  forget_torchrun();
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_TEST_SEED)");
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](uint64_t low, uint64_t high) {
    return std::uniform_int_distribution<uint64_t>(low, high)(rng);
  };
  constexpr uint64_t kEpochs = 2;
  for (const size_t devices : {1, 2, 3, 4}) {
    for (const size_t threads : {1, 2, 4, 8}) {
      const uint64_t batch = uniform(1, 9);
      const uint64_t samples = uniform(devices, 120);
      const bool shuffle = uniform(0, 1) == 1;
      const SyntheticOptions data = dataset(samples, uniform(1, 1000));
      const SyntheticSource truth(data);
      const std::string yaml =
          source_yaml(data) + "batch_size: " + std::to_string(batch) + "\nprefetch: " + std::to_string(uniform(1, 4)) +
          "\nsampler:\n  seed: 5\n  epochs: " + std::to_string(kEpochs) +
          "\n  shuffle: " + (shuffle ? "true" : "false") + "\ndecode:\n  threads: " + std::to_string(threads) + "\n";
      SCOPED_TRACE(std::to_string(devices) + " devices, " + std::to_string(threads) + " threads, config:\n" + yaml);
      const Config config = parse_config(yaml, "<test>", {"transfer.devices=" + devices_yaml(devices)});
      PipelineGroup group = make_pipeline_group(config, check_config(config));
      ASSERT_EQ(group.size(), devices);
      const std::vector<DeviceRun> runs = take(group, truth);
      EXPECT_FALSE(group.next()) << "the group keeps reporting its end";

      // Device d holds, at its position p, the position p x N + d of the process's order (wrapping to
      // the epoch's first samples where the last step pads), as rank d of N would.
      const std::vector<std::vector<uint64_t>> orders = epoch_orders(yaml, kEpochs);
      const uint64_t share = (samples + devices - 1) / devices;
      const uint64_t per_epoch = (share + batch - 1) / batch;
      for (size_t d = 0; d < devices; ++d) {
        ASSERT_EQ(runs[d].size(), per_epoch * kEpochs) << "device " << d;
        for (uint64_t e = 0; e < kEpochs; ++e) {
          uint64_t position = 0;
          for (uint64_t b = 0; b < per_epoch; ++b) {
            for (const uint64_t sample : runs[d][e * per_epoch + b]) {
              EXPECT_EQ(sample, orders[e][(position * devices + d) % samples])
                  << "device " << d << ", epoch " << e << ", position " << position;
              ++position;
            }
          }
          EXPECT_EQ(position, share);
        }
      }
      // Every step's batches together are the next N x batch_size samples of the order (the last one's
      // fewer), each sample of an epoch once apart from the padding.
      for (uint64_t e = 0; e < kEpochs; ++e) {
        std::map<uint64_t, int> seen;
        for (size_t d = 0; d < devices; ++d) {
          for (uint64_t b = 0; b < per_epoch; ++b) {
            for (const uint64_t sample : runs[d][e * per_epoch + b]) ++seen[sample];
          }
        }
        EXPECT_EQ(seen.size(), samples) << "a sample no device got, epoch " << e;
        uint64_t repeats = 0;
        for (const auto& [sample, count] : seen) repeats += static_cast<uint64_t>(count - 1);
        EXPECT_EQ(repeats, share * devices - samples) << "epoch " << e;
      }
      const std::vector<PipelineStats> stats = group.stats();
      ASSERT_EQ(stats.size(), devices);
      for (const PipelineStats& one : stats) {
        EXPECT_EQ(one.batches, per_epoch * kEpochs);
        EXPECT_EQ(one.pool.leased_bytes, 0u) << "a slab is still leased at the end of the run";
      }
      const PipelineStats all = merged_stats(stats);
      EXPECT_EQ(all.batches, per_epoch * kEpochs * devices);
      EXPECT_EQ(all.samples, share * devices * kEpochs);
      ASSERT_FALSE(all.stages.empty());
      // decode.threads, at most the samples the devices have in flight together.
      const size_t prefetch = group.pipeline(0).options().prefetch;
      EXPECT_EQ(all.stages.front().threads, std::min<size_t>(threads, devices * prefetch * batch))
          << "decode is one pool for every device, not one per device";
      EXPECT_EQ(all.decode_threads, all.stages.front().threads);
    }
  }
}

TEST(PipelineGroup, AStateSavedMidRunResumesExactlyInANewGroup) {
  forget_torchrun();
  const SyntheticOptions data = dataset(101, 77);
  const SyntheticSource truth(data);
  const std::string yaml = source_yaml(data) +
                           "batch_size: 4\nprefetch: 3\nsampler:\n  seed: 9\n  epochs: 3\n  shuffle: true\n"
                           "decode:\n  threads: 3\n";
  for (const size_t devices : {1, 2, 3}) {
    const Config config = parse_config(yaml, "<test>", {"transfer.devices=" + devices_yaml(devices)});
    const std::shared_ptr<const Source> source = check_config(config);
    PipelineGroup whole = make_pipeline_group(config, source);
    const std::vector<DeviceRun> expected = take(whole, truth);
    const uint64_t steps = expected.front().size();
    for (const uint64_t stop : {uint64_t{0}, uint64_t{1}, steps / 3, steps / 2 + 1, steps - 1, steps}) {
      SCOPED_TRACE(std::to_string(devices) + " devices, stopped after " + std::to_string(stop) + " steps");
      std::vector<DeviceRun> got(devices);
      std::string saved;
      {
        PipelineGroup first = make_pipeline_group(config, source);
        if (stop > 0) got = take(first, truth, stop);  // take()'s 0 means all
        saved = states_json(first.state());
      }  // destroyed with its prefetched batches unclaimed: they must come again
      const std::vector<PipelineState> states = parse_pipeline_states(saved, "<saved>");
      ASSERT_EQ(states.size(), devices);
      for (const PipelineState& state : states) EXPECT_EQ(state.next_batch, stop);
      PipelineGroup resumed = make_pipeline_group(config, source, states);
      const std::vector<DeviceRun> rest = take(resumed, truth);
      for (size_t d = 0; d < devices; ++d) {
        DeviceRun all = got[d];
        all.insert(all.end(), rest[d].begin(), rest[d].end());
        EXPECT_EQ(all, expected[d]) << "device " << d;
      }
    }
    // Another number of devices, or a single pipeline's state, is another order: refused.
    PipelineGroup one = make_pipeline_group(config, source);
    const std::vector<PipelineState> states = one.state();
    const Config other = parse_config(yaml, "<test>", {"transfer.devices=" + devices_yaml(devices + 1)});
    EXPECT_THROW((void)make_pipeline_group(other, check_config(other), states), ConfigError);
  }
}

// What `ferry run` saves when a signal comes while the group is still being made: the state the group
// would have given before its first step, fresh or resumed, without making it.
TEST(PipelineGroup, StartingStatesAreWhatTheGroupGivesBeforeItsFirstStep) {
  forget_torchrun();
  const SyntheticOptions data = dataset(57, 5);
  const SyntheticSource truth(data);
  const std::string yaml =
      source_yaml(data) + "batch_size: 4\nsampler:\n  seed: 3\n  epochs: 2\n  shuffle: true\ndecode:\n  threads: 2\n";
  for (const size_t devices : {0, 1, 3}) {  // 0: no transfer.devices, one pipeline
    SCOPED_TRACE(std::to_string(devices) + " devices");
    std::vector<std::string> overrides;
    if (devices > 0) overrides.push_back("transfer.devices=" + devices_yaml(devices));
    const Config config = parse_config(yaml, "<test>", overrides);
    const std::shared_ptr<const Source> source = check_config(config);
    const std::vector<PipelineState> fresh = starting_states(config, *source);
    EXPECT_EQ(states_json(fresh), states_json(make_pipeline_group(config, source).state()));
    std::vector<PipelineState> midway;
    {
      PipelineGroup group = make_pipeline_group(config, source);
      (void)take(group, truth, 3);
      midway = group.state();
    }
    // Resumed: where the states point, without the batch they name as last delivered (another run's).
    const std::vector<PipelineState> resumed = starting_states(config, *source, midway);
    EXPECT_EQ(states_json(resumed), states_json(make_pipeline_group(config, source, midway).state()));
    ASSERT_EQ(resumed.size(), midway.size());
    for (size_t d = 0; d < resumed.size(); ++d) {
      EXPECT_EQ(resumed[d].next_batch, midway[d].next_batch);
      EXPECT_FALSE(resumed[d].last_index.has_value());
    }
  }
}

// A step that times out part-way keeps the batches it took; the state counts the step as not delivered,
// and the next call completes it.
TEST(PipelineGroup, AStepTakenPartWayCountsAsNotDelivered) {
  forget_torchrun();
  const SyntheticOptions data = dataset(64, 3);
  const SyntheticSource truth(data);
  // Device 1's reads are slow: a short timeout finds device 0's batch ready and device 1's not.
  const auto slow = std::make_shared<testing::InstrumentedSource>(std::make_shared<SyntheticSource>(data), std::nullopt,
                                                                  std::chrono::milliseconds(40));
  PipelineOptions options;
  options.batch_size = 4;
  options.decode_threads = 2;
  options.prefetch = 2;
  std::vector<PipelinePart> parts;
  parts.push_back(sharded_part(std::make_shared<SyntheticSource>(data), options, 0, 2));
  parts.push_back(sharded_part(slow, options, 1, 2));
  PipelineGroup group = pipeline_group_from_parts(std::move(parts), 4);
  ASSERT_TRUE(group.next());  // both started
  bool part_way = false;
  for (int attempt = 0; attempt < 50 && !part_way; ++attempt) {
    const PipelineGroup::Next got = group.next_for(std::chrono::microseconds(200));
    if (!got.timed_out) continue;
    const std::vector<PipelineState> states = group.state();
    ASSERT_EQ(states.size(), 2u);
    EXPECT_EQ(states[0].next_batch, states[1].next_batch) << "the devices' states disagree on the step";
    if (group.pipeline(0).state().next_batch > states[0].next_batch) {
      part_way = true;
      ASSERT_TRUE(states[0].next);
      EXPECT_EQ(states[0].next->index, states[0].next_batch);
      EXPECT_EQ(states[0].next->position, states[0].next_batch * 4);
    }
    const std::optional<BatchGroup> step = group.next();
    ASSERT_TRUE(step);
    EXPECT_EQ((*step)[0].index(), (*step)[1].index());
  }
  EXPECT_TRUE(part_way) << "no timeout ever found device 0's batch taken and device 1's not";
}

// on_error: fail. The failing sample is in device 1's share: device 0's batch of that step is taken but
// the step is not delivered, and both devices' states point at it.
TEST(PipelineGroup, AFailingSampleStopsEveryDeviceAtTheSameStep) {
  forget_torchrun();
  const SyntheticOptions data = dataset(80, 21);
  const auto truth = std::make_shared<SyntheticSource>(data);
  constexpr uint64_t kFailing = 2 * 4 * 5 + 1;  // step 5 of 4-sample batches over 2 devices: device 1's
  PipelineOptions options;
  options.batch_size = 4;
  options.decode_threads = 2;
  std::vector<PipelinePart> parts;
  for (size_t d = 0; d < 2; ++d) {
    parts.push_back(sharded_part(std::make_shared<testing::InstrumentedSource>(truth, kFailing), options, d, 2));
  }
  PipelineGroup group = pipeline_group_from_parts(std::move(parts), 2);
  uint64_t steps = 0;
  try {
    while (group.next()) ++steps;
    ADD_FAILURE() << "the run ended without the failure";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample-" + std::to_string(kFailing)), std::string::npos) << e.what();
  }
  EXPECT_EQ(steps, 5u) << "every step before the failing one is delivered";
  EXPECT_THROW((void)group.next(), Error) << "the failure is reported again";
  for (const PipelineState& state : group.state()) {
    EXPECT_EQ(state.next_batch, 5u);
    ASSERT_TRUE(state.next);
    EXPECT_EQ(state.next->index, 5u);
  }
}

// Either device ending first is reported, naming both devices.
TEST(PipelineGroup, DevicesOutOfStepAreReported) {
  forget_torchrun();
  for (const bool first_ends : {false, true}) {
    SCOPED_TRACE(first_ends ? "device 0 ends first" : "device 1 ends first");
    std::vector<PipelinePart> parts;
    for (const uint64_t samples : {uint64_t{first_ends ? 8u : 12u}, uint64_t{first_ends ? 12u : 8u}}) {
      PipelineOptions options;
      options.batch_size = 4;
      options.device = "cpu";
      PipelinePart part;
      part.stages = make_standard_stages(std::make_shared<SyntheticSource>(dataset(samples, 1)), options);
      part.options = options;
      parts.push_back(std::move(part));
    }
    PipelineGroup group = pipeline_group_from_parts(std::move(parts), 2);
    EXPECT_TRUE(group.next());
    EXPECT_TRUE(group.next());
    try {
      (void)group.next();
      ADD_FAILURE() << "a device ended a batch early and nothing said so";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("out of step"), std::string::npos) << what;
      EXPECT_NE(what.find("(device 0)"), std::string::npos) << what;
      EXPECT_NE(what.find("(device 1)"), std::string::npos) << what;
    }
  }
}

// A saved group state whose devices are at different steps (edited, or pieced together from two runs)
// is refused when it is read, naming the device, not when the resumed group's devices disagree.
TEST(PipelineGroup, AStateWithDevicesOutOfStepIsRefusedAtLoadNamingTheDevice) {
  forget_torchrun();
  const SyntheticOptions data = dataset(64, 3);
  const Config config =
      parse_config(source_yaml(data) + "batch_size: 4\n", "<test>", {"transfer.devices=" + devices_yaml(3)});
  std::vector<PipelineState> states;
  {
    PipelineGroup group = make_pipeline_group(config, check_config(config));
    for (int step = 0; step < 2; ++step) ASSERT_TRUE(group.next());
    states = group.state();
  }
  ASSERT_NO_THROW(parse_pipeline_states(states_json(states), "<saved>"));
  for (const size_t device : {size_t{1}, size_t{2}}) {
    std::vector<PipelineState> edited = states;
    edited[device].next_batch += 1;
    if (edited[device].next) {
      edited[device].next->index += 1;
      edited[device].next->position += 4;
    }
    edited[device].last_index = edited[device].last_index.value_or(0) + 1;
    try {
      (void)parse_pipeline_states(states_json(edited), "edited.json");
      ADD_FAILURE() << "a group state out of step was accepted";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("devices[" + std::to_string(device) + "].next_batch: device " + std::to_string(device) +
                          " is at batch 3"),
                std::string::npos)
          << what;
    }
  }
}

// state() from another thread while steps are being taken: every device's state is at the same step, and
// never behind the steps handed out before it was asked nor ahead of those handed out after.
TEST(PipelineGroup, StateTakenDuringIterationIsAlwaysAWholeStep) {
  forget_torchrun();
  const SyntheticOptions data = dataset(3000, 8);
  for (const size_t threads : {1, 3}) {
    const Config config =
        parse_config(source_yaml(data) + "batch_size: 2\nprefetch: 2\n", "<test>",
                     {"transfer.devices=[cpu, cpu, cpu]", "decode.threads=" + std::to_string(threads)});
    PipelineGroup group = make_pipeline_group(config, check_config(config));
    std::atomic<uint64_t> handed{0};
    std::atomic<bool> done{false};
    std::thread watcher([&] {
      while (!done.load()) {
        const uint64_t before = handed.load();
        const std::vector<PipelineState> states = group.state();
        const uint64_t after = handed.load();
        for (const PipelineState& state : states) {
          EXPECT_EQ(state.next_batch, states.front().next_batch) << "the devices' states disagree";
          EXPECT_GE(state.next_batch, before);
          EXPECT_LE(state.next_batch, after + 1);
        }
      }
    });
    while (group.next()) handed.fetch_add(1);
    done.store(true);
    watcher.join();
    EXPECT_EQ(handed.load(), 500u);
  }
}

TEST(PipelineGroup, CloseWakesAConsumerAndEndsTheRun) {
  forget_torchrun();
  const SyntheticOptions data = dataset(400, 5);
  const Config config = parse_config(source_yaml(data) + "batch_size: 2\n", "<test>",
                                     {"transfer.devices=[cpu, cpu]", "decode.threads=2"});
  PipelineGroup group = make_pipeline_group(config, check_config(config));
  ASSERT_TRUE(group.next());
  group.close();
  EXPECT_FALSE(group.next());
}

// The config's checks, each named at its key.
TEST(PipelineGroup, BadDeviceListsAreRefusedAtTheirKey) {
  forget_torchrun();
  const std::string yaml = source_yaml(dataset(16, 1)) + "batch_size: 2\n";
  auto problem_of = [&](const std::string& text, const std::vector<std::string>& overrides) -> ConfigProblem {
    try {
      const Config config = parse_config(text, "<test>", overrides);
      (void)check_config(config);
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.problems().size(), 1u) << e.what();
      return e.problems().front();
    }
    ADD_FAILURE() << "accepted";
    return {};
  };
  EXPECT_EQ(problem_of(yaml, {"transfer.devices=[]"}).key, "transfer.devices");
  EXPECT_EQ(problem_of(yaml, {"transfer.devices=some"}).key, "transfer.devices");
  const ConfigProblem bare = problem_of(yaml, {"transfer.devices=[cpu, cuda]"});
  EXPECT_EQ(bare.key, "transfer.devices[1]");
  EXPECT_NE(bare.message.find("cuda:N"), std::string::npos) << bare.message;
  const ConfigProblem twice = problem_of(yaml, {"transfer.devices=[cuda:0, cuda:0]"});
  EXPECT_EQ(twice.key, "transfer.devices[1]");
  EXPECT_NE(twice.message.find("twice"), std::string::npos) << twice.message;
  EXPECT_EQ(problem_of(yaml, {"transfer.devices=[cuda:1, cuda:01]"}).key, "transfer.devices[1]")
      << "one GPU under two names";
  const ConfigProblem both = problem_of(yaml + "transfer:\n  device: cpu\n  devices: [cpu, cpu]\n", {});
  EXPECT_EQ(both.key, "transfer.devices");
  EXPECT_NE(both.message.find("transfer.device is set too"), std::string::npos) << both.message;
  // --set wins over the file: a config made for one device runs on several, and back.
  const Config several = parse_config(yaml + "transfer:\n  device: cpu\n", "<test>", {"transfer.devices=[cpu, cpu]"});
  EXPECT_EQ(group_devices(several), (std::vector<std::string>{"cpu", "cpu"}));
  const Config single = parse_config(yaml + "transfer:\n  devices: [cpu, cpu]\n", "<test>", {"transfer.device=cpu"});
  EXPECT_EQ(group_devices(single), (std::vector<std::string>{"cpu"}));
  if (!gpu_build() || cuda_device_count() == 0) {
    const ConfigProblem all = problem_of(yaml, {"transfer.devices=all"});
    EXPECT_EQ(all.key, "transfer.devices");
    const ConfigProblem missing = problem_of(yaml, {"transfer.devices=[cpu, cuda:0]"});
    EXPECT_EQ(missing.key, "transfer.devices");
  }
}

}  // namespace
}  // namespace ferry
