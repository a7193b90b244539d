#include <ferry/pipeline/error.h>

#include <gtest/gtest.h>

#include <ferry/build_config.h>
#include <ferry/pipeline/cuda_error.h>

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

TEST(Error, NamesStageSampleAndBatchBeforeTheCause) {
  const Error error(ErrorContext{"decode", 1234, 0, 38}, "bad JPEG");
  EXPECT_STREQ(error.what(), "ferry: decode failed on sample 1234 (epoch 0, batch 38): bad JPEG");
  EXPECT_EQ(error.sample_index(), 1234u);
  EXPECT_EQ(error.batch_index(), 38u);
  EXPECT_EQ(error.stage(), "decode");
  EXPECT_EQ(error.cause(), "bad JPEG");
}

TEST(Error, OmitsWhatIsNotKnown) {
  EXPECT_STREQ(Error("plain").what(), "ferry: plain");
  EXPECT_STREQ(Error(ErrorContext{"pack", {}, 2, 7}, "too big").what(), "ferry: pack failed in epoch 2, batch 7: too big");
}

TEST(Error, PlacedFillsOnlyMissingParts) {
  const Error inner(ErrorContext{"", 9, {}, {}}, "cause");
  const Error placed = inner.placed(ErrorContext{"decode", 1, 0, 3});
  EXPECT_EQ(placed.stage(), "decode");
  EXPECT_EQ(placed.sample_index(), 9u);
  EXPECT_EQ(placed.batch_index(), 3u);
  EXPECT_EQ(placed.cause(), "cause");
}

// Runs on any machine: without a device the call fails all the same, and the message must name the
// call, the file and line, and the runtime's error.
TEST(CudaCheck, ThrowsNamingTheCallFileAndLine) {
#if FERRY_HAVE_CUDART
  try {
    FERRY_CUDA_CHECK(cudaSetDevice(4096));
    FAIL() << "cudaSetDevice(4096) succeeded";
  } catch (const CudaError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cudaSetDevice(4096) failed with cuda"), std::string::npos) << message;
    EXPECT_NE(message.find("error_test.cpp:"), std::string::npos) << message;
    EXPECT_NE(e.code(), 0);
  }
#else
  GTEST_SKIP() << "built without the CUDA runtime";
#endif
}

}  // namespace
}  // namespace ferry
