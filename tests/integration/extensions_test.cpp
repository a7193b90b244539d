// A program's own source kind, decoder and sample transform, registered by name and used from YAML
// exactly as the built-in ones are: their keys checked, their values delivered, byte for byte, with any
// number of threads, across a resume; their failures named with the sample.
#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/io/formats/source_registry.h>
#include <ferry/io/formats/synthetic_source.h>
#include <ferry/io/transforms/transform_registry.h>
#include <ferry/io/util/splitmix64.h>
#include <ferry/pipeline/error.h>
#include <ferry/stages/standard_pipeline.h>

namespace ferry {
namespace {

using Type = KeySpec::Type;

// ---- a source kind: `counting`, sample i holds the text "i" repeated `copies` times ----------------------

class CountingSource : public Source {
 public:
  CountingSource(uint64_t samples, int64_t copies) : samples_(samples), copies_(copies) {
    fields_.push_back(FieldSpec{"count", at::kLong, {copies}, std::nullopt, "digits"});
  }
  const std::vector<FieldSpec>& fields() const override { return fields_; }
  uint64_t size() const override { return samples_; }
  EncodedSample read(uint64_t index) const override {
    const std::string text = std::to_string(index);
    at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
    std::memcpy(bytes.data_ptr(), text.data(), text.size());
    return EncodedSample{index, "counting:" + text, {bytes}};
  }
  std::string describe() const override { return "counting(" + std::to_string(samples_) + ")"; }

 private:
  uint64_t samples_;
  int64_t copies_;
  std::vector<FieldSpec> fields_;
};

// The decoder `digits`: the text as a number, `scale` times, in each of the field's copies. A sample whose
// index is `fail_at` fails, for the tests of failures.
class DigitsDecoder : public Decoder {
 public:
  DigitsDecoder(int64_t scale, int64_t fail_at) : scale_(scale), fail_at_(fail_at) {}
  std::string_view name() const override { return "digits"; }
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override {
    const std::string text(static_cast<const char*>(encoded.data_ptr()), static_cast<size_t>(encoded.numel()));
    const int64_t value = std::stoll(text);
    if (value == fail_at_) throw Error("digits: " + text + " is the number this decoder refuses");
    return at::full({spec.shape[0]}, value * scale_, at::kLong);
  }

 private:
  int64_t scale_;
  int64_t fail_at_;
};

void register_counting() {
  if (SourceRegistry::global().find("counting")) return;
  SourceKind kind;
  kind.name = "counting";
  kind.description = "Sample i holds i.";
  kind.keys = {
      {.name = "samples",
       .type = Type::kInteger,
       .default_value = "required",
       .required = true,
       .example = "10",
       .min = 1,
       .max = 1000000},
      {.name = "copies", .type = Type::kInteger, .default_value = "1", .example = "2", .min = 1, .max = 64},
      {.name = "decoder", .type = Type::kDecoder, .default_value = "digits", .example = "digits"},
  };
  kind.make = [](const KeyValue& keys) {
    return std::make_shared<CountingSource>(keys.at("samples").unsigned_integer(), keys.integer_or("copies", 1));
  };
  kind.check = [](const KeyValue& keys, KeyProblems& problems) {
    if (keys.integer_or("copies", 1) > keys.at("samples").integer()) {
      problems.add(keys.at("copies"), "more copies than samples");
    }
  };
  kind.fields = [](const KeyValue&) { return std::vector<FieldSpec>{FieldSpec{.name = "count"}}; };
  kind.decoded_fields = [](const KeyValue& keys) {
    return std::vector<DecodedField>{{"count", &keys, keys.text_or("decoder", "digits")}};
  };
  SourceRegistry::global().add(std::move(kind));

  DecoderKind digits;
  digits.name = "digits";
  digits.keys = {{.name = "scale", .type = Type::kInteger, .default_value = "1", .example = "3", .min = 1, .max = 1000},
                 {.name = "fail_at", .type = Type::kInteger, .default_value = "-1", .example = "4", .min = -1}};
  digits.make = [](const DecoderArgs& args) -> std::shared_ptr<const Decoder> {
    return std::make_shared<DigitsDecoder>(args.keys.integer_or("scale", 1), args.keys.integer_or("fail_at", -1));
  };
  DecoderRegistry::global().add(std::move(digits));
}

// ---- a transform: `mix`, which changes dtypes and shapes, adds and drops fields and draws at random ---------
//
// In: a field `count` int64 [copies]. Out: `total` int64 [] (the sum), `halves` float32 [copies] (count / 2),
// `run` int32 [*] (count[0] % 4 values, variable length, max_length 3) and, with `noise`, `noise` float32 [2]
// drawn from (seed, epoch, index); `count` is dropped.
class MixTransform : public Transform {
 public:
  explicit MixTransform(bool noise, int64_t fail_at) : noise_(noise), fail_at_(fail_at) {}
  std::string_view name() const override { return "mix"; }
  std::vector<FieldSpec> output_fields(const std::vector<FieldSpec>& input) const override {
    const auto count = std::find_if(input.begin(), input.end(), [](const FieldSpec& f) { return f.name == "count"; });
    if (count == input.end() || count->dtype != at::kLong) throw Error("needs an int64 field 'count'");
    std::vector<FieldSpec> output{FieldSpec{"total", at::kLong, {}}, FieldSpec{"halves", at::kFloat, count->shape},
                                  FieldSpec{"run", at::kInt, {kVariableLength}, 3}};
    if (noise_) output.push_back(FieldSpec{"noise", at::kFloat, {2}});
    return output;
  }
  void apply(SampleFields& sample, const SampleContext& context) const override {
    const at::Tensor count = sample.at("count");
    if (count[0].item<int64_t>() == fail_at_) throw Error("mix refuses " + std::to_string(fail_at_));
    sample.set("total", count.sum());
    sample.set("halves", count.to(at::kFloat) / 2);
    sample.set("run", at::arange(count[0].item<int64_t>() % 4, at::kInt));
    if (noise_) sample.set("noise", noise_of(context));
    sample.erase("count");
  }
  bool same_every_epoch() const override { return !noise_; }

  static at::Tensor noise_of(const SampleContext& context) {
    uint64_t state = context.random_seed();
    at::Tensor noise = at::empty({2}, at::kFloat);
    for (int64_t i = 0; i < 2; ++i) noise[i] = static_cast<float>(splitmix64(state) >> 40) / float(1 << 24);
    return noise;
  }

 private:
  bool noise_;
  int64_t fail_at_;
};

void register_mix() {
  register_counting();
  if (TransformRegistry::global().kind("mix")) return;
  TransformKind kind;
  kind.name = "mix";
  kind.keys = {{.name = "noise", .type = Type::kBoolean, .default_value = "false", .example = "true"},
               {.name = "fail_at", .type = Type::kInteger, .default_value = "-1", .example = "3", .min = -1}};
  kind.make = [](const KeyValue& keys) -> std::shared_ptr<const Transform> {
    return std::make_shared<MixTransform>(keys.boolean_or("noise", false), keys.integer_or("fail_at", -1));
  };
  TransformRegistry::global().add(std::move(kind));
}

std::string problems_of(const std::string& yaml) {
  try {
    (void)check_config(parse_config(yaml, "test.yaml"));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

struct Delivered {
  uint64_t epoch;
  std::vector<uint64_t> samples;
  std::map<std::string, at::Tensor> tensors;
};

std::vector<Delivered> take_all(Pipeline& pipeline) {
  std::vector<Delivered> all;
  for (const Batch& batch : pipeline) {
    Delivered delivered{batch.epoch(), batch.sample_indices(), {}};
    for (size_t f = 0; f < batch.size(); ++f) delivered.tensors[batch.names()[f]] = batch.tensors()[f].clone();
    all.push_back(std::move(delivered));
  }
  return all;
}

constexpr const char* kCounting = R"(
source: {kind: counting, samples: 37, copies: 3, scale: 5}
batch_size: 4
sampler: {shuffle: true, seed: 11, epochs: 2}
transfer: {device: cpu}
)";

TEST(Extensions, AProgramsSourceKindAndDecoderAreReadAndDeliverTheirValues) {
  register_counting();
  for (const size_t threads : {1, 2, 4, 8}) {
    SCOPED_TRACE(threads);
    Pipeline pipeline =
        make_pipeline(parse_config(kCounting, "test.yaml", {"decode.threads=" + std::to_string(threads)}));
    uint64_t samples = 0;
    for (const Batch& batch : pipeline) {
      const at::Tensor count = batch["count"];
      ASSERT_EQ(count.sizes(), (at::IntArrayRef{static_cast<int64_t>(batch.batch_size()), 3}));
      for (size_t row = 0; row < batch.batch_size(); ++row) {
        const auto expected = static_cast<int64_t>(batch.sample_indices()[row]) * 5;
        EXPECT_TRUE(at::equal(count[static_cast<int64_t>(row)], at::full({3}, expected, at::kLong)));
        ++samples;
      }
    }
    EXPECT_EQ(samples, 2u * 37u);
  }
}

TEST(Extensions, TheirKeysAreCheckedLikeBuiltInOnes) {
  register_mix();
  const std::vector<std::pair<std::string, std::string>> cases{
      {"source: {kind: counting, samples: 5, copeis: 2}\n",
       "test.yaml:1:38: source.copeis: unknown key (did you mean 'copies'?); known in source: kind, samples, copies, "
       "decoder, scale, fail_at"},
      {"source: {kind: counting, samples: 0}\n",
       "test.yaml:1:35: source.samples: expected an integer in 1..1000000, found '0'"},
      {"source: {kind: counting, copies: 2}\n", "test.yaml:1:9: source.samples: missing required key"},
      {"source: {kind: counting, samples: 2, copies: 3}\n", "test.yaml:1:46: source.copies: more copies than samples"},
      {"source: {kind: counting, samples: 2, scale: 0}\n",
       "test.yaml:1:45: source.scale: expected an integer in 1..1000, found '0'"},
      {"source: {kind: counting, samples: 2}\ntransforms: [{kind: mix, nois: true}]\n",
       "test.yaml:2:26: transforms[0].nois: unknown key (did you mean 'noise'?); known in transforms[0]: kind, noise, "
       "fail_at"},
      {"source: {kind: counting, samples: 2}\ntransforms: [{kind: mxi}]\n",
       "test.yaml:2:21: transforms[0].kind: expected one of drop, rename, boxes, python, mix, found 'mxi' (did you "
       "mean 'mix'?)"},
      {"source: {kind: countin, samples: 2}\n",
       "test.yaml:1:16: source.kind: expected one of synthetic, megatron, tokens, tar, jsonl, image_folder, python, mix, "
       "counting, found "
       "'countin' "
       "(did you mean 'counting'?)"},
  };
  for (const auto& [yaml, expected] : cases) {
    SCOPED_TRACE(yaml);
    const std::string problems = problems_of(yaml);
    EXPECT_NE(problems.find(expected), std::string::npos) << problems << "\n" << expected;
  }
}

TEST(Extensions, ATransformMakesOtherFieldsWhoseValuesArriveAtEveryThreadCount) {
  register_mix();
  const std::string yaml = std::string(kCounting) + "transforms: [{kind: mix}]\n";
  for (const size_t threads : {1, 2, 4, 8}) {
    SCOPED_TRACE(threads);
    Pipeline pipeline = make_pipeline(parse_config(yaml, "test.yaml", {"decode.threads=" + std::to_string(threads)}));
    uint64_t samples = 0;
    for (const Batch& batch : pipeline) {
      EXPECT_EQ(batch.names(), (std::vector<std::string>{"total", "halves", "run", "run_lengths"}));
      for (size_t row = 0; row < batch.batch_size(); ++row) {
        const auto r = static_cast<int64_t>(row);
        const int64_t value = static_cast<int64_t>(batch.sample_indices()[row]) * 5;
        EXPECT_EQ(batch["total"][r].item<int64_t>(), value * 3);
        EXPECT_TRUE(at::equal(batch["halves"][r], at::full({3}, static_cast<float>(value) / 2, at::kFloat)));
        const int64_t length = value % 4;
        ASSERT_EQ(batch["run_lengths"][r].item<int64_t>(), length);
        EXPECT_TRUE(at::equal(batch["run"][r].slice(0, 0, length), at::arange(length, at::kInt)));
        ++samples;
      }
    }
    EXPECT_EQ(samples, 2u * 37u);
  }
}

TEST(Extensions, ATransformsDrawsComeFromTheSampleAndEpochAndSurviveAResume) {
  register_mix();
  const std::string yaml = std::string(kCounting) + "transforms: [{kind: mix, noise: true}]\n";
  const Config config = parse_config(yaml, "test.yaml", {"decode.threads=1"});
  Pipeline whole = make_pipeline(config);
  const std::vector<Delivered> expected = take_all(whole);
  // The draws are the sample's and the epoch's: every sample of epoch 1 differs from its draw in epoch 0.
  std::map<uint64_t, at::Tensor> first;
  for (const Delivered& batch : expected) {
    for (size_t row = 0; row < batch.samples.size(); ++row) {
      const at::Tensor noise = batch.tensors.at("noise")[static_cast<int64_t>(row)];
      const SampleContext context{11, batch.epoch, batch.samples[row], ""};
      EXPECT_TRUE(at::equal(noise, MixTransform::noise_of(context)));
      if (batch.epoch == 0) first[batch.samples[row]] = noise;
      if (batch.epoch == 1) {
        EXPECT_FALSE(at::equal(noise, first.at(batch.samples[row])));
      }
    }
  }
  // Another thread count, and a run stopped after 7 batches and resumed in a new pipeline: the same bytes.
  Pipeline stopped = make_pipeline(parse_config(yaml, "test.yaml", {"decode.threads=8"}));
  std::vector<Delivered> parts;
  for (int i = 0; i < 7; ++i) {
    std::optional<Batch> batch = stopped.next();
    ASSERT_TRUE(batch);
    parts.push_back({batch->epoch(), batch->sample_indices(), {{"noise", (*batch)["noise"].clone()}}});
  }
  const PipelineState state = stopped.state();
  Pipeline resumed = make_pipeline(parse_config(yaml, "test.yaml", {"decode.threads=3"}), state);
  for (Delivered& rest : take_all(resumed)) parts.push_back(std::move(rest));
  ASSERT_EQ(parts.size(), expected.size());
  for (size_t b = 0; b < parts.size(); ++b) {
    EXPECT_EQ(parts[b].samples, expected[b].samples) << b;
    EXPECT_TRUE(at::equal(parts[b].tensors.at("noise"), expected[b].tensors.at("noise"))) << b;
  }
  // A cache would repeat the first epoch's draws: refused, naming the transform.
  EXPECT_NE(problems_of(yaml + "cache: {memory: host}\n").find("transform 'mix' makes another sample every epoch"),
            std::string::npos);
}

TEST(Extensions, AFailingDecoderOrTransformNamesTheSampleOrIsSkipped) {
  register_mix();
  // Sample 4: the decoder refuses its number (4), the transform what the decoder made of it (4 x scale 5).
  for (const std::string failing : {"source.fail_at=4", "transforms.0.fail_at=20"}) {
    SCOPED_TRACE(failing);
    const std::string yaml = std::string(kCounting) + "transforms: [{kind: mix}]\n";
    Pipeline failed = make_pipeline(parse_config(yaml, "test.yaml", {failing, "sampler.shuffle=false"}));
    try {
      while (failed.next()) {
      }
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.sample_index(), 4u);
      EXPECT_NE(std::string(e.what()).find("counting:4"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(failing.rfind("source", 0) == 0 ? "decoder 'digits'" : "transform 'mix'"),
                std::string::npos)
          << e.what();
    }
    Pipeline skipping =
        make_pipeline(parse_config(yaml, "test.yaml", {failing, "sampler.shuffle=false", "decode.on_error=skip"}));
    uint64_t samples = 0;
    for (const Batch& batch : skipping) {
      for (const uint64_t index : batch.sample_indices()) {
        EXPECT_NE(index, 4u);
        ++samples;
      }
    }
    EXPECT_EQ(samples, 2u * 36u);
    EXPECT_EQ(skipping.stats().skipped_samples, 2u);
  }
}

TEST(Extensions, ATransformWhoseInputOrOutputIsWrongIsNamed) {
  register_mix();
  // Input it cannot take: refused before anything starts, at `transforms`.
  const std::string synthetic =
      "source: {kind: synthetic, samples: 8, fields: [{name: x, dtype: float32, shape: [2]}]}\ntransfer: {device: "
      "cpu}\n";
  EXPECT_NE(problems_of(synthetic + "transforms: [{kind: mix}]\n")
                .find("transforms: transform 0 ('mix'): needs an int64 field 'count'"),
            std::string::npos)
      << problems_of(synthetic + "transforms: [{kind: mix}]\n");
  EXPECT_NE(problems_of(synthetic + "transforms: [{kind: drop, fields: [y]}]\n")
                .find("transform 0 ('drop'): the sample has no field 'y' (its fields: x)"),
            std::string::npos);
  EXPECT_NE(problems_of(synthetic + "transforms: [{kind: drop, fields: x}]\n").find("leaves the sample no field"),
            std::string::npos);
  EXPECT_NE(problems_of(synthetic + "transforms: [{kind: rename, from: x, to: y}]\ncollate: {pad_values: {x: 1}}\n")
                .find("collate.pad_values.x: the samples have no field 'x' after the transforms; their fields: y"),
            std::string::npos);
  // A transform that makes what it did not declare: the sample fails, naming the transform and the field.
  struct Liar : Transform {
    std::string_view name() const override { return "liar"; }
    std::vector<FieldSpec> output_fields(const std::vector<FieldSpec>& input) const override { return input; }
    void apply(SampleFields& sample, const SampleContext&) const override {
      sample.set("x", at::zeros({3}, at::kFloat));
    }
  };
  auto source = std::make_shared<SyntheticSource>(
      SyntheticOptions{.seed = 1, .samples = 4, .fields = {SyntheticField{.name = "x", .shape = {2}}}});
  PipelineOptions options;
  options.device = "cpu";
  Pipeline pipeline = make_pipeline(source, options, nullptr, {}, SampleTransforms{{std::make_shared<Liar>()}, 0});
  try {
    (void)pipeline.next();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'x' from transform 'liar': decoded shape [3] does not match the "
                                         "declared [2]"),
              std::string::npos)
        << e.what();
  }
}

TEST(Extensions, BuiltInTransformsDropAndRenameFields) {
  const std::string yaml = R"(
source: {kind: synthetic, samples: 20, seed: 4, fields: [{name: a, dtype: int32, shape: [3]}, {name: b, dtype: uint8, shape: [2]}, {name: c, dtype: float32}]}
transforms: [{kind: drop, fields: b}, {kind: rename, from: c, to: z}]
batch_size: 6
transfer: {device: cpu}
)";
  const Config config = parse_config(yaml, "test.yaml");
  const SyntheticSource truth(synthetic_options(config.source.keys));
  Pipeline pipeline = make_pipeline(config);
  for (const Batch& batch : pipeline) {
    EXPECT_EQ(batch.names(), (std::vector<std::string>{"a", "z"}));
    for (size_t row = 0; row < batch.batch_size(); ++row) {
      const std::vector<at::Tensor> expected = truth.expected(batch.sample_indices()[row]);
      EXPECT_TRUE(at::equal(batch["a"][static_cast<int64_t>(row)], expected[0]));
      EXPECT_TRUE(at::equal(batch["z"][static_cast<int64_t>(row)], expected[2]));
    }
  }
}

}  // namespace
}  // namespace ferry
