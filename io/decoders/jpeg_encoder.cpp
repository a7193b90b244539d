#include "ferry/io/decoders/jpeg_encoder.h"

#include <ATen/ATen.h>
#include <turbojpeg.h>

#include <cstring>
#include <memory>
#include <string>

#include "ferry/io/decoders/turbojpeg_handle.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

// Frees TurboJPEG's output buffer on every path.
struct TurboBuffer {
  unsigned char* data = nullptr;
  ~TurboBuffer() { tjFree(data); }
};

std::string shape_text(const at::Tensor& tensor) {
  std::string text = "[";
  for (int64_t d = 0; d < tensor.dim(); ++d) text += (d == 0 ? "" : ", ") + std::to_string(tensor.size(d));
  return text + "]";
}

int turbojpeg_subsampling(JpegSubsampling subsampling) {
  switch (subsampling) {
    case JpegSubsampling::k444: return TJSAMP_444;
    case JpegSubsampling::k422: return TJSAMP_422;
    case JpegSubsampling::k420: return TJSAMP_420;
    case JpegSubsampling::kGray: return TJSAMP_GRAY;
  }
  return TJSAMP_420;
}

}  // namespace

JpegEncoder::JpegEncoder(JpegEncodeOptions options) : options_(options) {
  if (options_.quality < 1 || options_.quality > 100) {
    throw Error("jpeg encoder: quality must be 1..100, found " + std::to_string(options_.quality));
  }
}

at::Tensor JpegEncoder::encode(const at::Tensor& image) const {
  const bool shape_ok = image.dim() == 3 && (image.size(2) == 1 || image.size(2) == 3 || image.size(2) == 4);
  if (image.scalar_type() != at::kByte || !shape_ok) {
    throw Error("jpeg encoder: expected a uint8 [H, W, C] image with C = 1 (gray), 3 (RGB) or 4 (CMYK), found " +
                dtype_name(image.scalar_type()) + " " + shape_text(image));
  }
  if (!image.device().is_cpu()) {
    throw Error("jpeg encoder: the image must be in CPU memory, found it on " + image.device().str());
  }
  const int64_t height = image.size(0), width = image.size(1), channels = image.size(2);
  // 65535: the largest height and width a JPEG frame header can hold.
  if (height < 1 || width < 1 || height > 65535 || width > 65535) {
    throw Error("jpeg encoder: JPEG images are 1..65535 pixels high and wide, found " + shape_text(image));
  }
  const at::Tensor pixels = image.is_contiguous() ? image : image.contiguous();
  const int format = channels == 3 ? TJPF_RGB : channels == 1 ? TJPF_GRAY : TJPF_CMYK;
  const int subsampling = channels == 1 ? TJSAMP_GRAY : turbojpeg_subsampling(options_.subsampling);

  const TurboJpegRole role = options_.progressive ? TurboJpegRole::kCompressProgressive : TurboJpegRole::kCompress;
  tjhandle handle = turbojpeg_handle(role);
  TurboBuffer jpeg;
  unsigned long size = 0;
  // TJFLAG_ACCURATEDCT: TurboJPEG compresses with the fast DCT unless told; the accurate one is what
  // other encoders (PIL, OpenCV) use, a little more faithful, and bit-exact across SIMD paths.
  const int status =
      tjCompress2(handle, pixels.data_ptr<uint8_t>(), static_cast<int>(width), 0, static_cast<int>(height), format,
                  &jpeg.data, &size, subsampling, options_.quality,
                  TJFLAG_ACCURATEDCT | (options_.progressive ? TJFLAG_PROGRESSIVE : 0));
  if (status != 0) {
    const std::string message = tjGetErrorStr2(handle);
    discard_turbojpeg_handle(role);
    throw Error("jpeg encoder: TurboJPEG failed on a " + shape_text(image) + " image: " + message);
  }
  at::Tensor bytes = at::empty({static_cast<int64_t>(size)}, at::kByte);
  std::memcpy(bytes.data_ptr<uint8_t>(), jpeg.data, size);
  return bytes;
}

}  // namespace ferry
