#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ferry/io/decoders/decoder.h"
#include "ferry/io/decoders/image_decode_options.h"

namespace ferry {

/// The options of image decoders, JpegDecoder's name for them (image_decode_options.h).
using JpegDecodeOptions = ImageDecodeOptions;

/// "jpeg": one JPEG file's bytes (a 1-D uint8 tensor) in, an HWC uint8 RGB tensor of the field's
/// fixed shape [H, W, 3] out, via libjpeg-turbo's TurboJPEG API. Grayscale JPEGs come out as three
/// equal channels; CMYK and YCCK JPEGs as Pillow and torchvision turn them into RGB (Note [CMYK JPEGs]
/// in jpeg_decoder.cpp: without colour management, as they do).
///
/// The image is resized, cropped and flipped as the options say (Note [image geometry] in
/// image_window.h); the result must be exactly the field's [H, W, 3] (or any size, for a field of
/// [null, null, 3]; checked from the JPEG header, before any pixel is decoded), otherwise decode() throws
/// naming both sizes and the options to set. Damaged data — anything libjpeg only warns about, such
/// as a truncated file it would pad with gray — is an Error carrying TurboJPEG's message and the
/// byte count: a corrupt sample never becomes plausible pixels.
///
/// Threads: decode() is called concurrently by the decode threads and is thread-safe; each thread
/// keeps its own TurboJPEG handle (see Note [TurboJPEG handle per thread] in turbojpeg_handle.cpp). The decoder owns
/// only its options; the returned tensor owns its memory (it does not keep `encoded` alive).
///
/// The built-in "jpeg" in DecoderRegistry has default options (no resize, no crop), so it only
/// suits datasets whose images already have the field's size. For the usual case a YAML config sets
/// the field's `resize_shorter` and `crop` (the "jpeg" decoder kind makes an instance of the field's own,
/// image_decoder_kinds.cpp); in code, hand make_pipeline() a configured instance for the field, which no
/// other pipeline sees:
///
///   make_pipeline(source, options, sampler, FieldDecoders{{"image", std::make_shared<JpegDecoder>(
///       JpegDecodeOptions{.resize_shorter = 256, .crop_height = 224, .crop_width = 224,
///                         .crop = JpegDecodeOptions::Crop::kRandom, .seed = 7})}});
///
/// (Registering one under its own name in DecoderRegistry::global() works too, for the whole process.)
class JpegDecoder : public Decoder {
 public:
  /// Throws ferry::Error for negative sizes, or a crop with one side 0 and the other not.
  explicit JpegDecoder(JpegDecodeOptions options = {}, std::string name = "jpeg");

  std::string_view name() const override { return name_; }
  const JpegDecodeOptions& options() const noexcept { return options_; }

  /// Thread-safe; allocates the output (and, when resizing, a scratch image); does not block.
  /// Throws ferry::Error for a spec that is not uint8 [H, W, 3], for bytes that are not a whole,
  /// undamaged JPEG, for an image that does not come out at the field's [H, W, 3], and for one of more
  /// than 2^27 pixels to decode (checked from the header; with dct_scaling, a resize decodes at 1/2 to
  /// 1/8). Random crops and flips drawn from (the seed, the encoded bytes): the same in every epoch.
  at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const override;
  /// A random crop drawn from (the seed, context.epoch, context.index): another one every epoch, the
  /// same on every run (Note [random crop]). Otherwise as decode().
  at::Tensor decode_sample(const at::Tensor& encoded, const FieldSpec& spec,
                           const DecodeContext& context) const override;
  /// No with a random crop or flip: another one every epoch.
  bool same_every_epoch() const override;
  /// `<field>_window` with options().window (image_window.h).
  std::vector<FieldSpec> companions(const FieldSpec& spec) const override;

 private:
  /// `context` seeds a random crop; null: a digest of the bytes does.
  at::Tensor decode_with(const at::Tensor& encoded, const FieldSpec& spec, const DecodeContext* context) const;

  JpegDecodeOptions options_;
  std::string name_;
};

}  // namespace ferry
