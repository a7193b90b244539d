// ImageAugment (Note [image augment]): its draws against torchvision's rules, its host arithmetic
// against libtorch's own bilinear resize, flip and normalization, and pipelines that augment.
#include <cmath>
#include <random>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/io/formats/synthetic_source.h>
#include <ferry/pipeline/error.h>
#include <ferry/stages/image_augment.h>
#include <ferry/stages/standard_pipeline.h>
#include "tests/support/image_checks.h"

namespace ferry {
namespace {

using detail::AugmentDraw;

AugmentOptions recipe() {
  AugmentOptions options;
  options.field = "image";
  options.random_resized_crop = true;
  options.height = 24;
  options.width = 20;
  options.flip = 0.5;
  options.seed = 11;
  return options;
}

TEST(ImageAugment, DrawsAreWindowsOfTheImageWithinScaleAndRatioAndRepeat) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 40; ++round) {
    AugmentOptions options = recipe();
    const int64_t height = 1 + static_cast<int64_t>(rng() % 300), width = 1 + static_cast<int64_t>(rng() % 300);
    options.scale_min = std::uniform_real_distribution<double>(0.01, 1.0)(rng);
    options.scale_max = std::uniform_real_distribution<double>(options.scale_min, 1.0)(rng);
    options.ratio_min = std::uniform_real_distribution<double>(0.2, 2.0)(rng);
    options.ratio_max = options.ratio_min * std::uniform_real_distribution<double>(1.0, 3.0)(rng);
    const ImageAugment augment(options, height, width);
    for (uint64_t sample = 0; sample < 200; ++sample) {
      SCOPED_TRACE(::testing::Message() << "round " << round << " " << height << "x" << width << " sample " << sample);
      const AugmentDraw draw = augment.draw(2, sample);
      ASSERT_GE(draw.top, 0);
      ASSERT_GE(draw.left, 0);
      ASSERT_GE(draw.height, 1);
      ASSERT_GE(draw.width, 1);
      ASSERT_LE(draw.top + draw.height, height);
      ASSERT_LE(draw.left + draw.width, width);
      const AugmentDraw again = augment.draw(2, sample);
      EXPECT_EQ(std::tie(draw.top, draw.left, draw.height, draw.width, draw.flip),
                std::tie(again.top, again.left, again.height, again.width, again.flip));
      const bool central = draw.top == (height - draw.height) / 2 && draw.left == (width - draw.width) / 2 &&
                           (draw.height == height || draw.width == width);
      if (central) continue;  // the fallback (or a try that happened to land there)
      // A try that fit: its sides are rounded from a window within scale and ratio, so the area and
      // the ratio are within those ranges up to half a pixel a side.
      const double area = static_cast<double>(height) * static_cast<double>(width);
      const double h = draw.height, w = draw.width;
      EXPECT_GE((h + 0.5) * (w + 0.5), options.scale_min * area * 0.999);
      EXPECT_LE((h - 0.5) * (w - 0.5), options.scale_max * area * 1.001);
      EXPECT_GE((w + 0.5) / std::max(0.5, h - 0.5), options.ratio_min * 0.999);
      EXPECT_LE(std::max(0.5, w - 0.5) / (h + 0.5), options.ratio_max * 1.001);
    }
  }
}

TEST(ImageAugment, FallsBackToTheLargestCentralWindowOfAClampedRatio) {
  AugmentOptions options = recipe();
  options.scale_min = 0.9;
  options.scale_max = 1.0;
  options.ratio_min = 2.0;
  options.ratio_max = 3.0;
  // A tall image (100 x 10): a window of ratio 2..3 and 90% of the area never fits.
  const ImageAugment tall(options, 100, 10);
  for (uint64_t sample = 0; sample < 50; ++sample) {
    const AugmentDraw draw = tall.draw(0, sample);
    EXPECT_EQ(std::tie(draw.top, draw.left, draw.height, draw.width), std::make_tuple(47, 0, 5, 10));
  }
  // A wide one (10 x 100) against ratios 0.25..0.5: the window is as high as the image, 5 wide.
  options.ratio_min = 0.25;
  options.ratio_max = 0.5;
  const ImageAugment wide(options, 10, 100);
  const AugmentDraw draw = wide.draw(0, 0);
  EXPECT_EQ(std::tie(draw.top, draw.left, draw.height, draw.width), std::make_tuple(0, 47, 10, 5));
}

TEST(ImageAugment, FlipsAtTheGivenRateIndependentlyOfTheCrop) {
  AugmentOptions options = recipe();
  for (double p : {0.0, 0.25, 0.5, 1.0}) {
    options.flip = p;
    const ImageAugment augment(options, 50, 60);
    AugmentOptions no_flip = options;
    no_flip.flip = 0;
    const ImageAugment plain(no_flip, 50, 60);
    int flips = 0;
    const int n = 20000;
    for (int sample = 0; sample < n; ++sample) {
      const AugmentDraw draw = augment.draw(5, static_cast<uint64_t>(sample));
      const AugmentDraw unflipped = plain.draw(5, static_cast<uint64_t>(sample));
      EXPECT_EQ(std::tie(draw.top, draw.left, draw.height, draw.width),
                std::tie(unflipped.top, unflipped.left, unflipped.height, unflipped.width));
      flips += draw.flip;
    }
    const double sigma = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(flips, n * p, 5 * sigma + 1e-9) << "p " << p;
  }
  // Another epoch or seed draws again.
  options.flip = 0.5;
  const ImageAugment augment(options, 50, 60);
  int same = 0;
  for (uint64_t sample = 0; sample < 100; ++sample) {
    const AugmentDraw a = augment.draw(0, sample), b = augment.draw(1, sample);
    same += a.top == b.top && a.left == b.left && a.height == b.height && a.width == b.width;
  }
  EXPECT_LT(same, 10);
}

// What libtorch makes of one sample: the window sliced, resized by upsample_bilinear2d
// (align_corners=False), flipped, scaled, normalized (in double), as [3, h, w] float.
at::Tensor reference(const at::Tensor& image, const AugmentDraw& draw, const AugmentOptions& options, int64_t out_h,
                     int64_t out_w) {
  at::Tensor window = image.slice(0, draw.top, draw.top + draw.height).slice(1, draw.left, draw.left + draw.width);
  at::Tensor chw = window.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat).contiguous();
  at::Tensor resized = at::upsample_bilinear2d(chw, {out_h, out_w}, /*align_corners=*/false)[0].to(at::kDouble);
  if (draw.flip != 0) resized = resized.flip({2});
  resized = resized / 255.0;
  if (options.normalize) {
    const at::Tensor mean =
        at::tensor({options.mean[0], options.mean[1], options.mean[2]}, at::kDouble).view({3, 1, 1});
    const at::Tensor deviation =
        at::tensor({options.std[0], options.std[1], options.std[2]}, at::kDouble).view({3, 1, 1});
    resized = (resized - mean) / deviation;
  }
  return resized.to(at::kFloat).contiguous();  // upsample may answer in channels-last strides
}

TEST(ImageAugment, HostOutputMatchesLibtorchsResizeFlipAndNormalizeInEveryDtypeAndLayout) {
  std::mt19937_64 rng(7);
  const AugmentOptions::DType dtypes[] = {AugmentOptions::DType::kFloat32, AugmentOptions::DType::kFloat16,
                                          AugmentOptions::DType::kBFloat16};
  for (int round = 0; round < 48; ++round) {
    AugmentOptions options = recipe();
    options.dtype = dtypes[round % 3];
    options.layout = round % 2 == 0 ? AugmentOptions::Layout::kNCHW : AugmentOptions::Layout::kNHWC;
    options.normalize = round % 4 < 2;
    options.mean = {0.485, 0.456, 0.406};
    options.std = {0.229, 0.224, 0.225};
    options.random_resized_crop = round % 6 != 5;  // one round in six: the whole image, not resized
    options.height = 1 + static_cast<int64_t>(rng() % 40);
    options.width = 1 + static_cast<int64_t>(rng() % 40);
    options.seed = rng();
    const int64_t height = 1 + static_cast<int64_t>(rng() % 50), width = 1 + static_cast<int64_t>(rng() % 50);
    const int64_t batch = 1 + static_cast<int64_t>(rng() % 5);
    const ImageAugment augment(options, height, width);
    const at::Tensor images = at::randint(0, 256, {batch, height, width, 3}, at::TensorOptions().dtype(at::kByte));
    std::vector<uint64_t> samples;
    for (int64_t s = 0; s < batch; ++s) samples.push_back(rng() % 1000);
    const std::vector<AugmentDraw> draws = augment.draws(3, samples);
    at::Tensor out = at::empty(augment.shape(batch), at::TensorOptions().dtype(augment.dtype()));
    ASSERT_EQ(static_cast<size_t>(out.nbytes()), augment.bytes(batch));
    augment.run_on_host(images.data_ptr<uint8_t>(), draws, out.data_ptr());

    const int64_t out_h = options.random_resized_crop ? options.height : height;
    const int64_t out_w = options.random_resized_crop ? options.width : width;
    at::Tensor got = out.to(at::kFloat);
    if (options.layout == AugmentOptions::Layout::kNHWC) got = got.permute({0, 3, 1, 2});
    for (int64_t s = 0; s < batch; ++s) {
      const AugmentDraw& d = draws[static_cast<size_t>(s)];
      SCOPED_TRACE(::testing::Message() << "round " << round << " sample " << s << " dtype "
                                        << augment_dtype_name(options.dtype) << " image " << height << "x" << width
                                        << " window " << d.top << "," << d.left << " " << d.height << "x" << d.width
                                        << (d.flip ? " flipped" : "") << " to " << out_h << "x" << out_w);
      const at::Tensor want = reference(images[s], draws[static_cast<size_t>(s)], options, out_h, out_w);
      const at::Tensor have = got[s].contiguous();
      ASSERT_EQ(have.sizes(), want.sizes());
      const float* w = want.data_ptr<float>();
      const float* h = have.data_ptr<float>();
      for (int64_t i = 0; i < want.numel(); ++i) {
        ASSERT_LE(std::fabs(h[i] - w[i]), testing::augment_tolerance(augment.dtype(), w[i])) << "element " << i;
      }
    }
  }
}

TEST(ImageAugment, WithoutACropOrFlipTheImageComesOutExactlyScaled) {
  AugmentOptions options;
  options.field = "image";
  const ImageAugment augment(options, 5, 7);
  const at::Tensor images = at::randint(0, 256, {2, 5, 7, 3}, at::TensorOptions().dtype(at::kByte));
  at::Tensor out = at::empty(augment.shape(2), at::kFloat);
  augment.run_on_host(images.data_ptr<uint8_t>(), augment.draws(0, std::vector<uint64_t>{0, 1}), out.data_ptr());
  const at::Tensor want = images.permute({0, 3, 1, 2}).to(at::kFloat) * static_cast<float>(1.0 / 255.0);
  EXPECT_TRUE(at::equal(out, want));
}

TEST(ImageAugment, RefusesOptionsAndFieldsItCannotAugment) {
  AugmentOptions options = recipe();
  options.flip = 1.5;
  EXPECT_THROW(ImageAugment(options, 10, 10), Error);
  options = recipe();
  options.scale_min = 0;
  EXPECT_THROW(ImageAugment(options, 10, 10), Error);
  options = recipe();
  options.std = {1, 0, 1};
  EXPECT_THROW(ImageAugment(options, 10, 10), Error);
  const std::vector<FieldSpec> fields = {FieldSpec{"image", at::kFloat, {8, 8, 3}},
                                         FieldSpec{"gray", at::kByte, {8, 8}}};
  options = recipe();
  try {
    (void)make_image_augment(options, fields);
    FAIL() << "a float field was augmented";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'image' must be uint8 images"), std::string::npos) << e.what();
  }
  options.field = "photo";
  try {
    (void)make_image_augment(options, fields);
    FAIL() << "a missing field was augmented";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no field 'photo' (its fields: image, gray)"), std::string::npos) << e.what();
  }
}

// ---- pipelines -----------------------------------------------------------------------------------

std::shared_ptr<const SyntheticSource> image_source() {
  SyntheticOptions synthetic;
  synthetic.seed = 5;
  synthetic.samples = 90;
  synthetic.fields = {SyntheticField{"image", at::kByte, {30, 26, 3}, false, 0, 0, std::nullopt},
                      SyntheticField{"label", at::kLong, {}, false, 0, 0, std::pair{0.0, 10.0}}};
  return std::make_shared<SyntheticSource>(synthetic);
}

std::vector<Batch> run_all(PipelineOptions options) {
  Pipeline pipeline = make_pipeline(image_source(), std::move(options));
  std::vector<Batch> batches;
  while (auto batch = pipeline.next()) batches.push_back(*batch);
  return batches;
}

PipelineOptions augmenting(size_t threads) {
  PipelineOptions options;
  options.device = "cpu";
  options.batch_size = 8;
  options.epochs = 2;
  options.decode_threads = threads;
  options.prefetch = 3;
  options.augment = recipe();
  options.augment.normalize = true;
  options.augment.mean = {0.5, 0.4, 0.3};
  options.augment.std = {0.2, 0.25, 0.3};
  options.augment.dtype = AugmentOptions::DType::kBFloat16;
  return options;
}

TEST(ImageAugmentPipeline, DeliversEachSampleAugmentedFromItsOwnImageAndTheSameAtEveryThreadCount) {
  PipelineOptions plain = augmenting(2);
  plain.augment = AugmentOptions{};
  const std::vector<Batch> images = run_all(plain);
  const ImageAugment augment(augmenting(2).augment, 30, 26);
  std::vector<Batch> first;
  for (size_t threads : {1, 2, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << threads << " decode threads");
    const std::vector<Batch> batches = run_all(augmenting(threads));
    ASSERT_EQ(batches.size(), images.size());
    for (size_t b = 0; b < batches.size(); ++b) {
      const Batch& batch = batches[b];
      ASSERT_EQ(batch.sample_indices(), images[b].sample_indices());
      EXPECT_TRUE(at::equal(batch["label"], images[b]["label"]));
      const at::Tensor& out = batch["image"];
      const auto n = static_cast<int64_t>(batch.batch_size());
      ASSERT_EQ(out.scalar_type(), at::kBFloat16);
      ASSERT_EQ(out.sizes(), at::IntArrayRef({n, 3, 24, 20}));
      for (int64_t s = 0; s < n; ++s) {
        const AugmentDraw draw = augment.draw(batch.epoch(), batch.sample_indices()[static_cast<size_t>(s)]);
        const at::Tensor want = reference(images[b]["image"][s], draw, augment.options(), 24, 20);
        const at::Tensor have = out[s].to(at::kFloat).contiguous();
        const float* w = want.data_ptr<float>();
        const float* h = have.data_ptr<float>();
        for (int64_t i = 0; i < want.numel(); ++i) {
          ASSERT_LE(std::fabs(h[i] - w[i]), testing::augment_tolerance(at::kBFloat16, w[i]))
              << "batch " << b << " sample " << s;
        }
      }
      if (first.size() < batches.size()) {
        first.push_back(batch);
      } else {
        EXPECT_TRUE(at::equal(batch["image"], first[b]["image"])) << "batch " << b;
      }
    }
  }
}

TEST(ImageAugmentPipeline, AResumedRunAugmentsTheRestExactlyAsTheWholeRunDid) {
  const std::vector<Batch> whole = run_all(augmenting(3));
  PipelineOptions resumed = augmenting(2);
  resumed.first_batch = 7;  // mid-way through the first of 2 epochs of 12 batches (90 samples, 8 a batch)
  const std::vector<Batch> rest = run_all(resumed);
  ASSERT_EQ(rest.size() + 7, whole.size());
  for (size_t b = 0; b < rest.size(); ++b) {
    EXPECT_EQ(rest[b].sample_indices(), whole[b + 7].sample_indices());
    EXPECT_TRUE(at::equal(rest[b]["image"], whole[b + 7]["image"])) << "batch " << b + 7;
  }
}

TEST(ImageAugmentPipeline, ACachedRunAugmentsEveryEpochAnewAsAnUncachedOneDoes) {
  const std::vector<Batch> uncached = run_all(augmenting(2));
  PipelineOptions options = augmenting(2);
  options.cache.memory = CacheMemory::kHost;  // the second epoch's images come from the cache
  const std::vector<Batch> cached = run_all(options);
  ASSERT_EQ(cached.size(), uncached.size());
  for (size_t b = 0; b < cached.size(); ++b) {
    EXPECT_EQ(cached[b].sample_indices(), uncached[b].sample_indices());
    EXPECT_TRUE(at::equal(cached[b]["image"], uncached[b]["image"])) << "batch " << b;
  }
}

}  // namespace
}  // namespace ferry
