#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ferry/io/decoders/decoder.h"
#include "ferry/io/decoders/image_decode_options.h"

namespace ferry {

/// "webp": one WebP file's bytes (a 1-D uint8 tensor) in, an HWC uint8 RGB tensor out, via libwebp:
/// lossy and lossless still images; an alpha channel is dropped (not blended), as Pillow's
/// convert("RGB") drops it. Animated files are refused (ferry decodes still images), as are images of
/// more than 2^27 pixels (from the header).
///
/// Resize, crop and flip as JpegDecoder does (ImageDecodeOptions: Note [image geometry] in
/// image_window.h); the result must be the field's [H, W, 3] (or any size for [null, null, 3]),
/// checked from the header before any pixel is decoded. Damaged data is an Error naming libwebp's status
/// and the byte count.
///
/// Threads: decode() is thread-safe. The decoder owns only its options; the returned tensor owns its
/// memory.
class WebpDecoder : public Decoder {
 public:
  /// Throws ferry::Error for options image_window.h's check refuses.
  explicit WebpDecoder(ImageDecodeOptions options = {}, std::string name = "webp");

  std::string_view name() const override { return name_; }
  const ImageDecodeOptions& options() const noexcept { return options_; }

  /// Random crops and flips drawn from (the seed, the encoded bytes): the same in every epoch.
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override;
  /// Random crops and flips drawn from (the seed, context.epoch, context.index).
  at::Tensor decode_sample(const at::Tensor& encoded, const FieldSpec& spec,
                           const DecodeContext& context) const override;
  bool same_every_epoch() const override;
  std::vector<FieldSpec> companions(const FieldSpec& spec) const override;

  /// Whether `encoded` starts as a WebP file does ("RIFF", a size, "WEBP").
  static bool is_webp(const at::Tensor& encoded);

 private:
  at::Tensor decode_with(const at::Tensor& encoded, const FieldSpec& spec, const DecodeContext* context) const;

  ImageDecodeOptions options_;
  std::string name_;
};

}  // namespace ferry
