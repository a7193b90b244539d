// jpeg_segments_complete (io/decoders/jpeg_markers.h): whole files of every kind the encoder writes pass;
// every shorter cut, stray bytes between segments and a segment longer than the file fail.
#include <ferry/io/decoders/jpeg_markers.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include <ferry/io/decoders/jpeg_encoder.h>
#include "tests/support/image_checks.h"

namespace ferry {
namespace {

using detail::jpeg_segments_complete;

std::vector<uint8_t> bytes_of(const at::Tensor& file) {
  const auto* data = file.data_ptr<uint8_t>();
  return {data, data + file.numel()};
}

bool complete(const std::vector<uint8_t>& file) { return jpeg_segments_complete(file.data(), file.size()); }

std::vector<std::vector<uint8_t>> files_of_every_kind() {
  std::vector<std::vector<uint8_t>> files;
  const at::Tensor image = testing::test_image(37, 53, 3, 5);
  for (const JpegSubsampling subsampling :
       {JpegSubsampling::k444, JpegSubsampling::k422, JpegSubsampling::k420, JpegSubsampling::kGray}) {
    for (const bool progressive : {false, true}) {
      files.push_back(bytes_of(JpegEncoder({.subsampling = subsampling, .progressive = progressive}).encode(image)));
    }
  }
  files.push_back(bytes_of(JpegEncoder().encode(testing::test_image(9, 11, 1, 6))));  // a gray image
  return files;
}

TEST(JpegMarkers, WholeFilesOfEveryKindAreComplete) {
  for (const auto& file : files_of_every_kind()) EXPECT_TRUE(complete(file)) << file.size() << " bytes";
}

TEST(JpegMarkers, EveryCutShortOfTheEndOfImageIsIncomplete) {
  for (const auto& file : files_of_every_kind()) {
    for (size_t cut = 0; cut < file.size(); ++cut) {  // up to the file without its last byte (EOI's D9)
      ASSERT_FALSE(jpeg_segments_complete(file.data(), cut)) << "cut at " << cut << " of " << file.size();
    }
  }
}

TEST(JpegMarkers, BytesAfterTheEndOfImageAreAllowed) {
  std::vector<uint8_t> file = files_of_every_kind().front();
  file.insert(file.end(), {0x00, 0x12, 0xFF, 0xD8});
  EXPECT_TRUE(complete(file));
}

TEST(JpegMarkers, StrayBytesAndOverlongSegmentsAreIncomplete) {
  const std::vector<uint8_t> file = files_of_every_kind().front();
  // A byte between SOI and the first segment.
  std::vector<uint8_t> stray = file;
  stray.insert(stray.begin() + 2, 0x42);
  EXPECT_FALSE(complete(stray));
  // The first segment (APP0 or DQT) claims more bytes than the file has.
  std::vector<uint8_t> overlong = file;
  ASSERT_EQ(overlong[2], 0xFF);
  overlong[4] = 0xFF;
  overlong[5] = 0xFF;
  EXPECT_FALSE(complete(overlong));
  // Not a JPEG at all.
  EXPECT_FALSE(complete(std::vector<uint8_t>{0x89, 'P', 'N', 'G', 0x0D, 0x0A}));
  EXPECT_FALSE(jpeg_segments_complete(nullptr, 0));
}

TEST(JpegMarkers, FillBytesAndStuffedBytesAreNotMarkers) {
  // SOI, a comment segment with an FF inside, fill bytes, SOS with a 2-byte header, entropy data holding a
  // stuffed FF 00 and a restart marker, fill bytes, EOI.
  const std::vector<uint8_t> file = {0xFF, 0xD8, 0xFF, 0xFE, 0x00, 0x04, 0xFF, 0xD9, 0xFF, 0xFF, 0xDA, 0x00, 0x02,
                                     0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD3, 0x56, 0xFF, 0xFF, 0xD9};
  EXPECT_TRUE(complete(file));
  // The same scan without its EOI: cut short.
  EXPECT_FALSE(complete({file.begin(), file.end() - 3}));
}

}  // namespace
}  // namespace ferry
