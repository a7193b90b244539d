#include <ferry/io/formats/synthetic_source.h>

#include <algorithm>
#include <cstdint>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/pipeline/error.h>

namespace ferry {
namespace {

SyntheticOptions mixed(uint64_t seed) {
  SyntheticOptions options;
  options.seed = seed;
  options.samples = 100;
  options.fields = {
      SyntheticField{"image", at::kByte, {3, 4, 5}, false, 0, 0, std::nullopt},
      SyntheticField{"label", at::kLong, {}, false, 0, 0, std::pair{0.0, 10.0}},
      SyntheticField{"tokens", at::kInt, {}, true, 2, 9, std::pair{-5.0, 5.0}},
      SyntheticField{"feat", at::kHalf, {2}, true, 0, 3, std::nullopt},
      SyntheticField{"w", at::kBFloat16, {6}, false, 0, 0, std::pair{10.0, 20.0}},
      SyntheticField{"x", at::kFloat, {7}, false, 0, 0, std::nullopt},
  };
  return options;
}

TEST(SyntheticSource, SameSeedAndIndexGiveTheSameBytes) {
  const SyntheticSource a(mixed(3));
  const SyntheticSource b(mixed(3));
  for (uint64_t index : {0, 1, 57, 99}) {
    const auto x = a.expected(index);
    const auto y = b.expected(index);
    ASSERT_EQ(x.size(), 6u);
    for (size_t f = 0; f < x.size(); ++f) EXPECT_TRUE(x[f].equal(y[f])) << "index " << index << " field " << f;
    const EncodedSample encoded = a.read(index);
    EXPECT_EQ(encoded.index, index);
    EXPECT_EQ(encoded.key, "synthetic:" + std::to_string(index));
    for (size_t f = 0; f < x.size(); ++f) {
      EXPECT_EQ(encoded.fields[f].scalar_type(), at::kByte);
      EXPECT_EQ(static_cast<size_t>(encoded.fields[f].numel()), x[f].nbytes());
    }
  }
}

TEST(SyntheticSource, DifferentIndicesAndSeedsDiffer) {
  const SyntheticSource a(mixed(3));
  const SyntheticSource b(mixed(4));
  EXPECT_FALSE(a.expected(1)[0].equal(a.expected(2)[0]));
  EXPECT_FALSE(a.expected(1)[0].equal(b.expected(1)[0]));
  EXPECT_FALSE(a.expected(1)[5].equal(a.expected(2)[5]));
}

TEST(SyntheticSource, ValuesAndLengthsStayInTheirBounds) {
  const SyntheticSource source(mixed(11));
  int64_t shortest = 100;
  int64_t longest = 0;
  for (uint64_t index = 0; index < source.size(); ++index) {
    const auto sample = source.expected(index);
    EXPECT_EQ(sample[0].sizes(), (std::vector<int64_t>{3, 4, 5}));
    EXPECT_EQ(sample[1].dim(), 0);
    EXPECT_GE(sample[1].item<int64_t>(), 0);
    EXPECT_LT(sample[1].item<int64_t>(), 10);
    const int64_t length = sample[2].size(0);
    shortest = std::min(shortest, length);
    longest = std::max(longest, length);
    EXPECT_GE(length, 2);
    EXPECT_LE(length, 9);
    if (length > 0) {
      EXPECT_GE(sample[2].min().item<int32_t>(), -5);
      EXPECT_LT(sample[2].max().item<int32_t>(), 5);
    }
    EXPECT_EQ(sample[3].size(1), 2);
    EXPECT_LE(sample[3].size(0), 3);
    EXPECT_GE(sample[4].to(at::kFloat).min().item<float>(), 10.0f);
    EXPECT_LE(sample[4].to(at::kFloat).max().item<float>(), 20.0f);
    EXPECT_GE(sample[5].min().item<float>(), -1.0f);
    EXPECT_LT(sample[5].max().item<float>(), 1.0f);
    EXPECT_FALSE(sample[5].isnan().any().item<bool>());
  }
  EXPECT_LT(shortest, longest);  // lengths really vary
}

// The widest ranges each dtype holds: all of int64 (written as the config would, -2^63 to 2^63 - 1,
// which the double makes 2^63: the bound is exclusive), all of uint8, float16 to its largest finite.
TEST(SyntheticSource, TheFullRangeOfEachDtypeIsAcceptedAndFilled) {
  SyntheticOptions options;
  options.samples = 64;
  options.fields = {
      SyntheticField{"i64", at::kLong, {64}, false, 0, 0, std::pair{-9223372036854775808.0, 9223372036854775807.0}},
      SyntheticField{"u8", at::kByte, {64}, false, 0, 0, std::pair{0.0, 256.0}},
      SyntheticField{"f16", at::kHalf, {64}, false, 0, 0, std::pair{-65504.0, 65504.0}},
      SyntheticField{"top", at::kLong, {64}, false, 0, 0, std::pair{9223372036854775807.0 - 4096, 9223372036854775807.0}}};
  const SyntheticSource source(options);
  int64_t least = 0;
  int64_t most = 0;
  for (uint64_t index = 0; index < source.size(); ++index) {
    const auto sample = source.expected(index);
    least = std::min(least, sample[0].min().item<int64_t>());
    most = std::max(most, sample[0].max().item<int64_t>());
    EXPECT_TRUE(sample[2].to(at::kFloat).isfinite().all().item<bool>());
    EXPECT_GE(sample[3].min().item<int64_t>(), INT64_MAX - 4096);
  }
  EXPECT_LT(least, INT64_MIN / 2);  // values from all of the range
  EXPECT_GT(most, INT64_MAX / 2);
}

TEST(SyntheticSource, DeclaresVariableFieldsWithTheirMaximum) {
  const SyntheticSource source(mixed(1));
  const auto& specs = source.fields();
  ASSERT_EQ(specs.size(), 6u);
  EXPECT_FALSE(specs[0].variable());
  EXPECT_TRUE(specs[2].variable());
  EXPECT_EQ(specs[2].shape, (std::vector<int64_t>{kVariableLength}));
  EXPECT_EQ(specs[2].max_length, 9);
  EXPECT_FALSE(specs[0].max_length);
  EXPECT_EQ(specs[3].shape, (std::vector<int64_t>{kVariableLength, 2}));
  EXPECT_EQ(specs[0].decoder, "raw");
  EXPECT_EQ(source.describe(), "synthetic(seed=1, samples=100, fields=6)");
}

TEST(SyntheticSource, RejectsBadFieldsAndIndices) {
  auto with = [](SyntheticField field) {
    SyntheticOptions options;
    options.fields = {std::move(field)};
    return options;
  };
  EXPECT_THROW(SyntheticSource(with(SyntheticField{"", at::kByte, {}, false, 0, 0, {}})), Error);
  EXPECT_THROW(SyntheticSource(with(SyntheticField{"a", at::kDouble, {}, false, 0, 0, {}})), Error);
  EXPECT_THROW(SyntheticSource(with(SyntheticField{"a", at::kByte, {-1}, false, 0, 0, {}})), Error);
  EXPECT_THROW(SyntheticSource(with(SyntheticField{"a", at::kByte, {}, true, 5, 4, {}})), Error);
  EXPECT_THROW(SyntheticSource(with(SyntheticField{"a", at::kByte, {3, 0}, true, 1, 4, {}})), Error);
  EXPECT_THROW(SyntheticSource(with(SyntheticField{"a", at::kByte, {}, false, 0, 0, std::pair{0.0, 300.0}})), Error);
  EXPECT_THROW(SyntheticSource(with(SyntheticField{"a", at::kInt, {}, false, 0, 0, std::pair{0.5, 3.0}})), Error);
  EXPECT_THROW(SyntheticSource(with(SyntheticField{"a", at::kFloat, {}, false, 0, 0, std::pair{1.0, 1.0}})), Error);
  // Float ranges the dtype cannot hold are refused as integer ones are (float16's came out all inf).
  const auto range_error = [&](at::ScalarType dtype, double low, double high) -> std::string {
    try {
      SyntheticSource source(with(SyntheticField{"a", dtype, {}, false, 0, 0, std::pair{low, high}}));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(range_error(at::kHalf, -1e30, 1e30).find("(bounds within [-65504, 65504])"), std::string::npos)
      << range_error(at::kHalf, -1e30, 1e30);
  EXPECT_NE(range_error(at::kBFloat16, 0, 1e39).find("not valid for bfloat16"), std::string::npos);
  EXPECT_NE(range_error(at::kFloat, -1e39, 0).find("not valid for float32"), std::string::npos);
  EXPECT_EQ(range_error(at::kHalf, -65504, 65504), "");
  // Bounds print in full, so the refusal of a range past int64 shows why.
  EXPECT_NE(range_error(at::kLong, 0, 1e19).find("range [0, 10000000000000000000) is empty or not valid for int64 "
                                                 "(bounds within [-9223372036854775808, 9223372036854775808]"),
            std::string::npos)
      << range_error(at::kLong, 0, 1e19);
  SyntheticOptions twice = with(SyntheticField{"a", at::kByte, {}, false, 0, 0, {}});
  twice.fields.push_back(twice.fields[0]);
  EXPECT_THROW(SyntheticSource{twice}, Error);
  const SyntheticSource source(mixed(0));
  EXPECT_THROW(source.read(100), Error);
}

}  // namespace
}  // namespace ferry
