#include <ferry/pipeline/error.h>

#include <stdexcept>

#include <c10/util/Exception.h>
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
  EXPECT_STREQ(Error(ErrorContext{"pack", {}, 2, 7}, "too big").what(),
               "ferry: pack failed in epoch 2, batch 7: too big");
}

TEST(Error, PlacedFillsOnlyMissingParts) {
  const Error inner(ErrorContext{"", 9, {}, {}}, "cause");
  const Error placed = inner.placed(ErrorContext{"decode", 1, 0, 3});
  EXPECT_EQ(placed.stage(), "decode");
  EXPECT_EQ(placed.sample_index(), 9u);
  EXPECT_EQ(placed.batch_index(), 3u);
  EXPECT_EQ(placed.cause(), "cause");
}

TEST(Error, CauseOfNamesTheCauseAloneAndDropsLibtorchsBacktrace) {
  EXPECT_EQ(cause_of(Error(ErrorContext{"decode", 3, 0, 1}, "bad byte")), "bad byte");
  EXPECT_EQ(cause_of(std::runtime_error("plain")), "plain");
  try {
    TORCH_CHECK(false, "shape mismatch");
    ADD_FAILURE() << "TORCH_CHECK(false) did not throw";
  } catch (const c10::Error& e) {
    EXPECT_EQ(cause_of(e), "shape mismatch");
    EXPECT_EQ(cause_of(std::current_exception()), "shape mismatch");
    EXPECT_NE(std::string(e.what()).find("shape mismatch"), std::string::npos);
  }
  EXPECT_EQ(cause_of(std::make_exception_ptr(42)), "unknown exception");
}

TEST(Error, ErrorFromKeepsAFerryErrorsPlaceAndPlacesAnythingElse) {
  const ErrorContext where{"collate", std::nullopt, 2, 9};
  const Error kept = error_from(std::make_exception_ptr(Error(ErrorContext{"decode", 5, {}, {}}, "bad")), where);
  EXPECT_EQ(kept.stage(), "decode");
  EXPECT_EQ(kept.sample_index(), 5u);
  EXPECT_EQ(kept.epoch(), 2u);  // filled from `where`
  EXPECT_EQ(kept.batch_index(), 9u);
  EXPECT_EQ(kept.cause(), "bad");
  const Error placed = error_from(std::make_exception_ptr(std::out_of_range("index 7")), where);
  EXPECT_EQ(placed.stage(), "collate");
  EXPECT_EQ(placed.cause(), "index 7");
  EXPECT_STREQ(placed.what(), "ferry: collate failed in epoch 2, batch 9: index 7");
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
