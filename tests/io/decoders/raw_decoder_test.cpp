#include <ferry/io/decoders/raw_decoder.h>

#include <algorithm>
#include <utility>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/pipeline/error.h>

namespace ferry {
namespace {

at::Tensor bytes_of(const at::Tensor& tensor) { return tensor.contiguous().view(at::kByte).reshape({-1}).clone(); }

TEST(RawDecoder, ReinterpretsBytesAsTheDeclaredDtypeAndShape) {
  const at::Tensor original = at::randn({4, 3});
  const FieldSpec spec{"x", at::kFloat, {4, 3}, std::nullopt, "raw"};
  const at::Tensor decoded = RawDecoder().decode(bytes_of(original), spec);
  EXPECT_EQ(decoded.scalar_type(), at::kFloat);
  EXPECT_TRUE(decoded.equal(original));
}

TEST(RawDecoder, InfersTheLengthOfVariableFields) {
  const at::Tensor original = at::arange(5 * 2, at::kShort).view({5, 2}).to(at::kHalf);
  const FieldSpec spec{"v", at::kHalf, {kVariableLength, 2}, 8, "raw"};
  const at::Tensor decoded = RawDecoder().decode(bytes_of(original), spec);
  EXPECT_EQ(decoded.sizes(), (std::vector<int64_t>{5, 2}));
  EXPECT_TRUE(decoded.equal(original));
  const at::Tensor empty = RawDecoder().decode(at::empty({0}, at::kByte), spec);
  EXPECT_EQ(empty.sizes(), (std::vector<int64_t>{0, 2}));
}

TEST(RawDecoder, PassesAlreadyTypedTensors) {
  const at::Tensor typed = at::arange(6, at::kLong);
  const at::Tensor decoded = RawDecoder().decode(typed, FieldSpec{"t", at::kLong, {2, 3}, std::nullopt, "raw"});
  EXPECT_TRUE(decoded.equal(typed.view({2, 3})));
}

// A member read from a larger buffer (a shard read in one piece) starts anywhere: the decoded tensor
// views the bytes in place where they start at a whole element, and a copy elsewhere.
TEST(RawDecoder, DecodesBytesAtAnyOffsetOfALargerBuffer) {
  const at::Tensor original = at::randn({3, 5}).to(at::kDouble);
  const at::Tensor bytes = bytes_of(original);
  for (int64_t offset = 0; offset < 16; ++offset) {
    at::Tensor buffer = at::zeros({offset + bytes.numel() + 3}, at::kByte);
    const at::Tensor member = buffer.narrow(0, offset, bytes.numel());
    member.copy_(bytes);
    for (const FieldSpec& spec : {FieldSpec{"x", at::kDouble, {3, 5}, std::nullopt, "raw"},
                                  FieldSpec{"x", at::kDouble, {kVariableLength, 5}, 3, "raw"}}) {
      const at::Tensor decoded = RawDecoder().decode(member, spec);
      SCOPED_TRACE("offset " + std::to_string(offset));
      EXPECT_TRUE(decoded.is_contiguous());
      EXPECT_TRUE(decoded.equal(original));
      EXPECT_EQ(decoded.data_ptr() == member.data_ptr(), offset % 8 == 0) << "viewed in place iff aligned";
    }
  }
}

TEST(RawDecoder, ExplainsBytesThatDoNotFit) {
  try {
    RawDecoder().decode(at::zeros({13}, at::kByte), FieldSpec{"x", at::kFloat, {3}, std::nullopt, "raw"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("13 bytes are not a whole number of float32 elements"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(RawDecoder().decode(at::zeros({16}, at::kByte), FieldSpec{"x", at::kFloat, {3}, std::nullopt, "raw"}),
               Error);
  EXPECT_THROW(RawDecoder().decode(at::zeros({12}, at::kByte),
                                   FieldSpec{"x", at::kFloat, {kVariableLength, 2}, std::nullopt, "raw"}),
               Error);
  EXPECT_THROW(RawDecoder().decode(at::zeros({3}, at::kInt), FieldSpec{"x", at::kFloat, {3}, std::nullopt, "raw"}),
               Error);
}

TEST(RawDecoder, CutsAndPadsRowsWhereAsked) {
  // Rows of 3 int32 values, 1 to 7 of them, against a field of 4 rows and one of at most 4.
  const FieldSpec fixed{"x", at::kInt, {4, 3}, std::nullopt, "raw"};
  const FieldSpec variable{"x", at::kInt, {kVariableLength, 3}, 4, "raw"};
  const RawDecoder both(RawDecoder::Options{.truncate = true, .pad_value = -7});
  for (int64_t rows = 0; rows <= 7; ++rows) {
    const at::Tensor original = at::arange(rows * 3, at::kInt).view({rows, 3}) + 100;
    const at::Tensor decoded = both.decode(bytes_of(original), fixed);
    ASSERT_EQ(decoded.sizes(), (std::vector<int64_t>{4, 3})) << rows;
    const int64_t kept = std::min<int64_t>(rows, 4);
    EXPECT_TRUE(decoded.slice(0, 0, kept).equal(original.slice(0, 0, kept))) << rows;
    EXPECT_TRUE((decoded.slice(0, kept) == -7).all().item<bool>()) << rows;
    const at::Tensor cut = both.decode(bytes_of(original), variable);
    EXPECT_TRUE(cut.equal(original.slice(0, 0, kept))) << rows;
  }
  // Without the options, what does not fit is an error saying which option takes it.
  for (const auto& [rows, advice] : {std::pair<int64_t, const char*>{2, "pad_value"}, {6, "truncate"}}) {
    try {
      RawDecoder().decode(bytes_of(at::zeros({rows, 3}, at::kInt)), fixed);
      FAIL() << rows;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(advice), std::string::npos) << e.what();
    }
  }
  // Past max_length without truncate: left to the decode stage, which names max_length.
  EXPECT_EQ(RawDecoder().decode(bytes_of(at::zeros({6, 3}, at::kInt)), variable).size(0), 6);
  // The registry makes the configured decoder from a field's keys.
  DecoderRegistry registry;
  const KeyValue keys = KeyValue::mapping({{"truncate", KeyValue::scalar("true")}});
  const auto made = registry.make("raw", DecoderArgs{variable, keys, 0});
  EXPECT_EQ(made->decode(bytes_of(at::zeros({6, 3}, at::kInt)), variable).size(0), 4);
}

TEST(DecoderRegistry, FindsBuiltInsAndNamesTheKnownOnesWhenAsked) {
  DecoderRegistry registry;
  EXPECT_EQ(registry.find("raw")->name(), "raw");
  try {
    registry.find("jpeg2000");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "ferry: unknown decoder 'jpeg2000'; registered decoders: raw, jpeg, png, webp, image, npy, label, "
                 "json, sentencepiece");
  }
  EXPECT_THROW(registry.add(std::make_shared<RawDecoder>()), Error);
}

}  // namespace
}  // namespace ferry
