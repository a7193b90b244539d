#include <ferry/pipeline/batch.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/pipeline/error.h>
#include <ferry/pipeline/tensor_views.h>

namespace ferry {
namespace {

Batch two_field_batch() {
  auto schema = std::make_shared<const BatchSchema>(std::vector<std::string>{"image", "label"});
  return Batch(schema, {at::ones({2, 3}), at::arange(2)}, BatchInfo{5, 1, 2, {10, 11}});
}

TEST(Batch, FindsFieldsByNameAndKeepsItsMetadata) {
  const Batch batch = two_field_batch();
  EXPECT_EQ(batch.size(), 2u);
  EXPECT_TRUE(batch.contains("label"));
  EXPECT_FALSE(batch.contains("labels"));
  EXPECT_TRUE(batch["image"].equal(at::ones({2, 3})));
  EXPECT_EQ(batch.find("nope"), nullptr);
  EXPECT_EQ(batch.sequence(), 5u);
  EXPECT_EQ(batch.epoch(), 1u);
  EXPECT_EQ(batch.index(), 2u);
  EXPECT_EQ(batch.sample_indices(), (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(batch.nbytes(), 6 * sizeof(float) + 2 * sizeof(int64_t));
  EXPECT_TRUE(batch.device().is_cpu());
}

TEST(Batch, MissingFieldErrorListsTheFieldsThereAre) {
  try {
    (void)two_field_batch()["lable"];
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "ferry: batch has no field 'lable'; its fields are: 'image' 'label'");
  }
}

TEST(Batch, ListFieldsGiveEachSamplesViewAndOthersSayWhichAreLists) {
  auto schema = std::make_shared<const BatchSchema>(std::vector<std::string>{"image", "label"});
  const at::Tensor flat = at::arange(10, at::kFloat);
  std::vector<std::vector<at::Tensor>> lists(2);
  lists[0] = {flat.slice(0, 0, 6).view({2, 3}), flat.slice(0, 6, 10).view({1, 4})};
  const Batch batch(schema, {flat, at::arange(2)}, BatchInfo{0, 0, 0, {3, 4}}, {}, {}, lists);
  EXPECT_TRUE(batch.is_list("image"));
  EXPECT_FALSE(batch.is_list("label"));
  ASSERT_EQ(batch.list("image").size(), 2u);
  EXPECT_EQ(batch.list("image")[1].sizes(), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(batch.list("image")[1].data_ptr<float>(), flat.data_ptr<float>() + 6);
  EXPECT_EQ(batch.list_at(1), nullptr);
  try {
    (void)batch.list("label");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "ferry: batch field 'label' is not a list; its lists are: 'image'");
  }
  EXPECT_THROW((void)two_field_batch().list("image"), Error);                            // no lists at all
  EXPECT_THROW(Batch(schema, {flat, at::arange(2)}, BatchInfo{}, {}, {}, {{}}), Error);  // one list for two fields
}

TEST(BatchSchema, RejectsDuplicateAndEmptyNames) {
  EXPECT_THROW(BatchSchema({"a", "a"}), Error);
  EXPECT_THROW(BatchSchema({"a", ""}), Error);
  EXPECT_EQ(BatchSchema({"a", "b"}).find("b"), 1u);
}

TEST(TensorViews, ViewsShareOneStorageAtTheirOffsets) {
  at::Tensor buffer = at::zeros({64}, at::kByte);
  auto* bytes = buffer.data_ptr<uint8_t>();
  const float values[] = {1.5f, -2.0f, 3.25f, 4.0f};
  std::memcpy(bytes + 16, values, sizeof values);
  const int16_t shorts[] = {7, -8};
  std::memcpy(bytes + 48, shorts, sizeof shorts);

  const at::Tensor floats = make_view(buffer.storage(), buffer.device(), at::kFloat, 16, {2, 2});
  const at::Tensor halves = make_view(buffer.storage(), buffer.device(), at::kShort, 48, {2});
  EXPECT_TRUE(floats.equal(at::tensor({1.5f, -2.0f, 3.25f, 4.0f}).view({2, 2})));
  EXPECT_TRUE(halves.equal(at::tensor(std::vector<int16_t>{7, -8})));
  EXPECT_TRUE(floats.is_contiguous());
  EXPECT_TRUE(floats.storage().is_alias_of(buffer.storage()));
  floats.fill_(0);  // writes land in the shared buffer
  EXPECT_EQ(bytes[16], 0);
  EXPECT_FALSE(floats.requires_grad());
}

TEST(TensorViews, RefusesMisalignedOrOversizedViews) {
  at::Tensor buffer = at::zeros({64}, at::kByte);
  EXPECT_THROW(make_view(buffer.storage(), buffer.device(), at::kFloat, 2, {1}), Error);
  EXPECT_THROW(make_view(buffer.storage(), buffer.device(), at::kFloat, 60, {2}), Error);
  EXPECT_NO_THROW(make_view(buffer.storage(), buffer.device(), at::kFloat, 64, {0}));
}

}  // namespace
}  // namespace ferry
