// The augmentation kernel against ImageAugment's host loop (Note [image augment]), every output
// element, over random sizes, options, dtypes and layouts; and a GPU pipeline against a CPU one.
//
// No tolerance: the two share augment_tap() and augment_value(), compiled without fused multiply-adds
// on both sides (Note [image augment]), so every element is the same number.
#include <iomanip>
#include <random>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/io/formats/synthetic_source.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/segment_copy.h>
#include <ferry/stages/image_augment.h>
#include <ferry/stages/standard_pipeline.h>

namespace ferry {
namespace {

class ImageAugmentCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
    if (const std::string why = segment_kernel_reason(); !why.empty()) GTEST_SKIP() << why;
  }
};

// Checks every element for equality; names the first that differs.
void expect_equal(const at::Tensor& device, const at::Tensor& host, const std::string& what) {
  const at::Tensor d = device.cpu().to(at::kFloat).contiguous().view(-1);
  const at::Tensor h = host.to(at::kFloat).contiguous().view(-1);
  ASSERT_EQ(d.numel(), h.numel()) << what;
  const float* dp = d.data_ptr<float>();
  const float* hp = h.data_ptr<float>();
  for (int64_t i = 0; i < d.numel(); ++i) {
    if (dp[i] != hp[i]) {
      ADD_FAILURE() << what << ", element " << i << ": " << std::setprecision(9) << dp[i] << " on the GPU, " << hp[i]
                    << " on the host";
      return;
    }
  }
}

TEST_F(ImageAugmentCuda, TheKernelMatchesTheHostLoopOnEveryElement) {
  std::mt19937_64 rng(17);
  const AugmentOptions::DType dtypes[] = {AugmentOptions::DType::kFloat32, AugmentOptions::DType::kFloat16,
                                          AugmentOptions::DType::kBFloat16};
  for (int round = 0; round < 30; ++round) {
    AugmentOptions options;
    options.field = "image";
    options.dtype = dtypes[round % 3];
    options.layout = round % 2 == 0 ? AugmentOptions::Layout::kNCHW : AugmentOptions::Layout::kNHWC;
    options.random_resized_crop = round % 5 != 4;
    options.height = 1 + static_cast<int64_t>(rng() % 300);
    options.width = 1 + static_cast<int64_t>(rng() % 300);
    options.flip = static_cast<double>(rng() % 3) / 2;
    options.normalize = round % 4 < 3;
    options.mean = {0.485, 0.456, 0.406};
    options.std = {0.229, 0.224, 0.225};
    options.seed = rng();
    const int64_t height = 1 + static_cast<int64_t>(rng() % 400), width = 1 + static_cast<int64_t>(rng() % 400);
    // Up to 1100 samples: more than one launch's draws (kAugmentDrawsPerLaunch) now and then.
    const int64_t batch = round == 7 ? 1100 : 1 + static_cast<int64_t>(rng() % 40);
    const ImageAugment augment(options, round == 7 ? 8 : height, round == 7 ? 9 : width);
    const at::Tensor images = at::randint(0, 256, {batch, augment.image_height(), augment.image_width(), 3},
                                          at::TensorOptions().dtype(at::kByte));
    std::vector<uint64_t> samples;
    for (int64_t s = 0; s < batch; ++s) samples.push_back(rng());
    const std::vector<detail::AugmentDraw> draws = augment.draws(round, samples);

    at::Tensor host = at::empty(augment.shape(batch), at::TensorOptions().dtype(augment.dtype()));
    augment.run_on_host(images.data_ptr<uint8_t>(), draws, host.data_ptr());

    const at::Tensor device_images = images.to(at::Device(at::kCUDA, 0));
    at::Tensor device =
        at::empty(augment.shape(batch), at::TensorOptions().dtype(augment.dtype()).device(at::kCUDA, 0));
    // On the legacy default stream, which the copies to and from the device (libtorch's current stream) follow.
    augment.run_on_device(device_images.data_ptr<uint8_t>(), draws, device.data_ptr(), nullptr);
    expect_equal(device, host, "round " + std::to_string(round));
  }
}

std::vector<Batch> run_all(const std::string& device) {
  SyntheticOptions synthetic;
  synthetic.seed = 8;
  synthetic.samples = 300;
  synthetic.fields = {SyntheticField{"image", at::kByte, {64, 48, 3}, false, 0, 0, std::nullopt},
                      SyntheticField{"label", at::kLong, {}, false, 0, 0, std::pair{0.0, 10.0}}};
  PipelineOptions options;
  options.device = device;
  options.batch_size = 32;
  options.epochs = 2;
  options.decode_threads = 4;
  options.augment.field = "image";
  options.augment.random_resized_crop = true;
  options.augment.height = 40;
  options.augment.width = 36;
  options.augment.flip = 0.5;
  options.augment.normalize = true;
  options.augment.mean = {0.485, 0.456, 0.406};
  options.augment.std = {0.229, 0.224, 0.225};
  options.augment.dtype = AugmentOptions::DType::kBFloat16;
  options.augment.seed = 3;
  Pipeline pipeline = make_pipeline(std::make_shared<SyntheticSource>(synthetic), options);
  std::vector<Batch> batches;
  while (auto batch = pipeline.next()) batches.push_back(*batch);
  return batches;
}

TEST_F(ImageAugmentCuda, AGpuPipelineDeliversWhatACpuPipelineDoes) {
  const std::vector<Batch> gpu = run_all("cuda:0");
  const std::vector<Batch> cpu = run_all("cpu");
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t b = 0; b < gpu.size(); ++b) {
    ASSERT_EQ(gpu[b].sample_indices(), cpu[b].sample_indices());
    ASSERT_TRUE(gpu[b]["image"].is_cuda());
    EXPECT_TRUE(at::equal(gpu[b]["label"].cpu(), cpu[b]["label"]));
    expect_equal(gpu[b]["image"], cpu[b]["image"], "batch " + std::to_string(b));
  }
}

}  // namespace
}  // namespace ferry
