#include "ferry/io/decoders/png_decoder.h"

#include <ATen/ATen.h>
#include <png.h>

#include <algorithm>
#include <array>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "ferry/io/decoders/image_window.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

constexpr size_t kSignatureBytes = 8;
// A width or height past this is a broken or hostile header, not a photo (libpng's own default cap
// is 1,000,000): refused before any memory is allocated for it.
constexpr png_uint_32 kMaxSide = 1 << 16;
// And an image of more than detail::kMaxImagePixels pixels (the PNG is decoded whole).
constexpr int64_t kMaxPixels = detail::kMaxImagePixels;

// libpng reports errors by longjmp; everything between setjmp and the jump is plain data (no
// destructors to skip). The message is kept for the ferry::Error thrown after the jump.
struct Reader {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t offset = 0;
  char message[256] = {};
  png_structp png = nullptr;
  png_infop info = nullptr;

  ~Reader() { png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr); }
};

void on_error(png_structp png, png_const_charp message) {
  auto* reader = static_cast<Reader*>(png_get_error_ptr(png));
  std::snprintf(reader->message, sizeof reader->message, "%s", message);
  png_longjmp(png, 1);
}

// Most warnings (an odd ICC profile, an unknown chunk) leave the pixels as they are: PIL reads such
// files, and so does ferry. Those that say the image data is damaged fail the file, as the JPEG decoder
// fails a damaged JPEG, so that `on_error: skip` can skip it.
void on_warning(png_structp png, png_const_charp message) {
  static constexpr std::array<const char*, 3> kDamage{"Extra compressed data", "Too many IDATs", "Too much image data"};
  for (const char* damage : kDamage) {
    if (std::strstr(message, damage) != nullptr) png_error(png, message);
  }
}

void on_read(png_structp png, png_bytep out, png_size_t count) {
  auto* reader = static_cast<Reader*>(png_get_io_ptr(png));
  if (count > reader->size - reader->offset) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, reader->data + reader->offset, count);
  reader->offset += count;
}

struct Header {
  png_uint_32 width = 0, height = 0;
  std::vector<png_color> palette;  // a palette image's: its rows are read as indices, one byte each
};

// Reads the header and sets the transforms to 8-bit RGB. false: libpng failed (reader.message says why).
bool read_header(Reader& reader, Header& header) {
  if (setjmp(png_jmpbuf(reader.png))) return false;
  png_set_read_fn(reader.png, &reader, on_read);
  png_set_user_limits(reader.png, kMaxSide, kMaxSide);
  png_read_info(reader.png, reader.info);
  int bit_depth = 0, color_type = 0;
  png_get_IHDR(reader.png, reader.info, &header.width, &header.height, &bit_depth, &color_type, nullptr, nullptr,
               nullptr);
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    // Indices, expanded by expand_palette(), which checks them: libpng's expansion turns an index past
    // the palette into black without a word (and PIL into other values).
    png_colorp palette = nullptr;
    int entries = 0;
    png_get_PLTE(reader.png, reader.info, &palette, &entries);
    header.palette.assign(palette, palette + entries);
    png_set_packing(reader.png);  // 1, 2 and 4-bit indices to a byte each
  } else {
    png_set_expand(reader.png);  // gray below 8 bits to 8, tRNS to an alpha channel
    if (bit_depth == 16) png_set_strip_16(reader.png);
    if ((color_type & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(reader.png);
    png_set_strip_alpha(reader.png);
  }
  (void)png_set_interlace_handling(reader.png);
  png_read_update_info(reader.png, reader.info);
  const size_t channels = header.palette.empty() ? 3 : 1;
  if (png_get_rowbytes(reader.png, reader.info) != static_cast<size_t>(header.width) * channels) {
    png_error(reader.png, "unexpected row layout after conversion to 8-bit RGB or indices");
  }
  return true;
}

// Reads every row into `rows`, then the chunks after the image (a file cut there is refused too).
bool read_rows(Reader& reader, png_bytep* rows) {
  if (setjmp(png_jmpbuf(reader.png))) return false;
  png_read_image(reader.png, rows);
  // libpng has read the chunk in which the compressed image ends, and skips further IDAT chunks that
  // follow it without a word: image data beyond the image (a file written twice over) is damage.
  if (reader.size - reader.offset >= 8 && std::memcmp(reader.data + reader.offset + 4, "IDAT", 4) == 0 &&
      std::memcmp(reader.data + reader.offset, "\0\0\0\0", 4) != 0) {
    png_error(reader.png, "image data beyond the image (an IDAT chunk after the compressed image ended)");
  }
  png_read_end(reader.png, nullptr);
  return true;
}

// `indices` [H, W] through `palette` into `image` [H, W, 3]. An index past the palette is damage: its
// color is not in the file. Returns the first such index, or -1.
int expand_palette(const at::Tensor& indices, const std::vector<png_color>& palette, at::Tensor& image) {
  std::array<png_color, 256> colors{};
  std::copy(palette.begin(), palette.end(), colors.begin());
  const uint8_t* in = indices.data_ptr<uint8_t>();
  uint8_t* out = image.data_ptr<uint8_t>();
  const int64_t pixels = indices.numel();
  int past = -1;
  for (int64_t i = 0; i < pixels; ++i) {
    const uint8_t index = in[i];
    if (index >= palette.size() && past < 0) past = index;
    out[3 * i] = colors[index].red;
    out[3 * i + 1] = colors[index].green;
    out[3 * i + 2] = colors[index].blue;
  }
  return past;
}

}  // namespace

PngDecoder::PngDecoder(ImageDecodeOptions options, std::string name) : options_(options), name_(std::move(name)) {
  detail::check_image_options(options_, "png", name_);
}

bool PngDecoder::is_png(const at::Tensor& encoded) {
  if (encoded.scalar_type() != at::kByte || encoded.numel() < static_cast<int64_t>(kSignatureBytes)) return false;
  const at::Tensor head = encoded.slice(0, 0, kSignatureBytes).contiguous();
  return png_sig_cmp(head.data_ptr<uint8_t>(), 0, kSignatureBytes) == 0;
}

at::Tensor PngDecoder::decode(const at::Tensor& encoded, const FieldSpec& spec) const {
  return decode_with(encoded, spec, nullptr);
}

at::Tensor PngDecoder::decode_sample(const at::Tensor& encoded, const FieldSpec& spec,
                                     const DecodeContext& context) const {
  return decode_with(encoded, spec, &context);
}

at::Tensor PngDecoder::decode_with(const at::Tensor& encoded, const FieldSpec& spec,
                                   const DecodeContext* context) const {
  const at::Tensor bytes = detail::encoded_image_bytes(encoded, spec, "png", "PNG");
  const int64_t size = bytes.numel();
  const uint8_t* data = bytes.data_ptr<uint8_t>();
  if (size < static_cast<int64_t>(kSignatureBytes) || png_sig_cmp(data, 0, kSignatureBytes) != 0) {
    throw Error("not a PNG (" + std::to_string(size) + " bytes): the file does not start with PNG's signature");
  }

  Reader reader;
  reader.data = data;
  reader.size = static_cast<size_t>(size);
  reader.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, on_error, on_warning);
  if (reader.png == nullptr) throw Error("png: cannot create libpng's reader (out of memory)");
  reader.info = png_create_info_struct(reader.png);
  if (reader.info == nullptr) throw Error("png: cannot create libpng's info (out of memory)");
  // A bad checksum fails the file on any chunk, not only on those that hold pixels (libpng's default
  // drops an ancillary chunk with a warning): the file is damaged either way.
  png_set_crc_action(reader.png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);
  const auto failed = [&](const char* doing) {
    return Error("corrupt PNG (" + std::to_string(size) + " bytes) while " + doing + ": " + reader.message);
  };

  Header header;
  if (!read_header(reader, header)) throw failed("reading the header");
  const auto height = static_cast<int64_t>(header.height), width = static_cast<int64_t>(header.width);
  if (height * width > kMaxPixels) {
    throw Error("PNG of " + std::to_string(width) + " x " + std::to_string(height) + " pixels (" +
                std::to_string(height * width) + ") is larger than ferry decodes (" + std::to_string(kMaxPixels) +
                " pixels at most): a damaged or hostile header, or an image to shrink before training");
  }
  const detail::ImageWindow window =
      detail::plan_image_window("PNG", height, width, options_, detail::CropSource{context, data, size}, spec);

  at::Tensor image = at::empty({height, width, 3}, at::kByte);
  const bool indexed = !header.palette.empty();
  const at::Tensor indices = indexed ? at::empty({height, width}, at::kByte) : at::Tensor();
  uint8_t* const first = indexed ? indices.data_ptr<uint8_t>() : image.data_ptr<uint8_t>();
  const int64_t row_bytes = indexed ? width : width * 3;
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y) rows[static_cast<size_t>(y)] = first + y * row_bytes;
  if (!read_rows(reader, rows.data())) throw failed("decoding");
  if (indexed) {
    if (const int past = expand_palette(indices, header.palette, image); past >= 0) {
      std::snprintf(reader.message, sizeof reader.message, "a palette index (%d) past the palette's %zu entries", past,
                    header.palette.size());
      throw failed("decoding");
    }
  }

  at::Tensor out = detail::resample_window(image, window, options_);
  detail::report_window(options_, window, context);
  return out;
}

bool PngDecoder::same_every_epoch() const { return !options_.random(); }

std::vector<FieldSpec> PngDecoder::companions(const FieldSpec& spec) const {
  return detail::image_companions(options_, spec);
}

}  // namespace ferry
