#pragma once

#include <ATen/core/Tensor.h>

namespace ferry {

/// How JpegEncoder stores colour: chroma resolution, as JPEG's sampling factors say.
enum class JpegSubsampling {
  k444,   // full-resolution chroma
  k422,   // chroma halved horizontally
  k420,   // chroma halved both ways: what cameras, PIL and torchvision write by default
  kGray,  // luminance only: a 3-channel image is converted to gray
};

struct JpegEncodeOptions {
  /// libjpeg's quality scale, 1..100 (the quantisation tables of the IJG reference).
  int quality = 90;
  /// For 3-channel (RGB) and 4-channel (CMYK) images; 1-channel images are always gray.
  JpegSubsampling subsampling = JpegSubsampling::k420;
  /// A progressive JPEG (several scans) instead of a baseline one: what GPU decoders cannot decode.
  bool progressive = false;
};

/// An HWC uint8 image in, the bytes of a baseline (or progressive) JPEG file out (a 1-D uint8 tensor, what a Source
/// hands JpegDecoder), via libjpeg-turbo's TurboJPEG API. Channels: 3 = RGB (stored as YCbCr, as
/// JPEG files are), 1 = gray, 4 = CMYK (stored as YCCK, with an Adobe marker, as print workflows write
/// them). Any strides: a non-contiguous image is copied first.
///
/// Deterministic: the same pixels and options give the same bytes from the same libjpeg-turbo (its
/// accurate integer DCT, standard Huffman tables, a JFIF header with no varying fields). Another
/// libjpeg-turbo version may write other bytes for the same pixels.
///
/// Threads: encode() is const and thread-safe; each thread keeps its own TurboJPEG compressor (see
/// Note [TurboJPEG handle per thread] in turbojpeg_handle.cpp). Owns only its options; the result
/// owns its memory. Allocates the result (and TurboJPEG's output buffer, freed before returning);
/// does not block.
class JpegEncoder {
 public:
  /// Throws ferry::Error for a quality outside 1..100.
  explicit JpegEncoder(JpegEncodeOptions options = {});

  const JpegEncodeOptions& options() const noexcept { return options_; }

  /// Throws ferry::Error for an image that is not uint8 [H, W, C] with C in {1, 3, 4} and H, W in
  /// 1..65535 (JPEG's limit), naming what it got, and for a TurboJPEG failure with its message.
  at::Tensor encode(const at::Tensor& image) const;

 private:
  JpegEncodeOptions options_;
};

}  // namespace ferry
