#pragma once

#include <string>
#include <string_view>

#include "ferry/io/decoders/decoder.h"
#include "ferry/io/decoders/image_decode_options.h"

namespace ferry {

/// "png": one PNG file's bytes (a 1-D uint8 tensor) in, an HWC uint8 RGB tensor of the field's fixed
/// shape [H, W, 3] out, via libpng. As PIL's Image.convert("RGB") and torchvision's decode_png make
/// it: palettes expanded, grayscale repeated into three channels, 16-bit samples cut to their high
/// byte, an alpha channel dropped (not blended), no gamma correction. Interlaced files are read too.
/// (One difference: PIL clips 16-bit grayscale to 255 where ferry, like torchvision, keeps the high
/// byte.) Images of more than 2^27 pixels are refused from the header.
///
/// Resize, crop and flip as JpegDecoder does (ImageDecodeOptions, the same windows and the same random
/// choices: Note [image geometry]). The result must be exactly the field's [H, W, 3] (or any size for
/// [null, null, 3]; checked from the header, before any pixel is decoded), otherwise decode() throws naming both sizes
/// and the options to set. A file that is not a PNG, is truncated or has a bad checksum in a chunk the image needs is
/// an Error carrying libpng's message and the byte count: a corrupt sample never becomes plausible pixels.
///
/// Threads: decode() is thread-safe (each call has its own libpng state). The decoder owns only its
/// options; the returned tensor owns its memory.
class PngDecoder : public Decoder {
 public:
  /// Throws ferry::Error for negative sizes, or a crop with one side 0 and the other not.
  explicit PngDecoder(ImageDecodeOptions options = {}, std::string name = "png");

  std::string_view name() const override { return name_; }
  const ImageDecodeOptions& options() const noexcept { return options_; }

  /// Thread-safe; allocates the output (and a scratch image when resizing); does not block. Throws
  /// ferry::Error for a spec that is not uint8 [H, W, 3], for bytes that are not a whole, undamaged
  /// PNG, and for an image that does not come out at [H, W, 3]. A random crop is drawn from (the
  /// seed, the encoded bytes): the same in every epoch.
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override;
  /// A random crop drawn from (the seed, context.epoch, context.index): another one every epoch, the
  /// same on every run. Otherwise as decode().
  at::Tensor decode_sample(const at::Tensor& encoded, const FieldSpec& spec,
                           const DecodeContext& context) const override;
  /// No with a random crop or flip: another one every epoch.
  bool same_every_epoch() const override;
  /// `<field>_window` with options().window (image_window.h).
  std::vector<FieldSpec> companions(const FieldSpec& spec) const override;

  /// Whether `encoded` starts with PNG's signature.
  static bool is_png(const at::Tensor& encoded);

 private:
  at::Tensor decode_with(const at::Tensor& encoded, const FieldSpec& spec, const DecodeContext* context) const;

  ImageDecodeOptions options_;
  std::string name_;
};

}  // namespace ferry
