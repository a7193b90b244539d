#pragma once

#include <string>
#include <string_view>

#include "ferry/io/decoders/decoder.h"
#include "ferry/io/decoders/image_decode_options.h"
#include "ferry/io/decoders/jpeg_decoder.h"
#include "ferry/io/decoders/png_decoder.h"
#include "ferry/io/decoders/webp_decoder.h"

namespace ferry {

/// "image": a JPEG, PNG or WebP file, told apart by its first bytes, decoded by JpegDecoder, PngDecoder or
/// WebpDecoder with the same options: for folders and shards that mix them. Each file gives exactly what the
/// decoder of its format gives; anything else is an Error that says what the bytes are not.
///
/// Threads: decode() is thread-safe, as the three decoders are. Owns them.
class ImageDecoder : public Decoder {
 public:
  /// Throws ferry::Error for options (or a name) JpegDecoder refuses.
  explicit ImageDecoder(ImageDecodeOptions options = {}, std::string name = "image");

  std::string_view name() const override { return name_; }
  const ImageDecodeOptions& options() const noexcept { return jpeg_.options(); }

  /// As JpegDecoder::decode(), PngDecoder::decode() or WebpDecoder::decode(), whichever the bytes'
  /// format needs. Throws ferry::Error for bytes of another format.
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override;
  at::Tensor decode_sample(const at::Tensor& encoded, const FieldSpec& spec,
                           const DecodeContext& context) const override;
  bool same_every_epoch() const override { return jpeg_.same_every_epoch(); }
  std::vector<FieldSpec> companions(const FieldSpec& spec) const override { return jpeg_.companions(spec); }

 private:
  /// The decoder for `encoded`'s format; throws for an unknown one.
  const Decoder& decoder_for(const at::Tensor& encoded) const;

  std::string name_;
  JpegDecoder jpeg_;
  PngDecoder png_;
  WebpDecoder webp_;
};

}  // namespace ferry
