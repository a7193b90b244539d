#include "ferry/io/formats/token_window_source.h"

#include <cstring>
#include <optional>
#include <utility>

#include <ATen/ops/empty.h>

#include "ferry/pipeline/error.h"

namespace ferry {

// Note [uint16 tokens]
// ~~~~~~~~~~~~~~~~~~~~
// Megatron stores tokens as uint16 whenever the vocabulary has fewer than 65500 entries, and
// keeping them 2 bytes wide through the host-to-device copy halves the bytes moved; the consumer
// widens them on the device (an embedding wants int32/int64 anyway). That needs a libtorch that has
// a uint16 tensor type: at::kUInt16 exists from libtorch 2.3 on. On an older libtorch (Debian's
// 1.13, on the CPU build machine) there is no dtype that holds 0..65535 in 2 bytes — int16 would
// turn ids above 32767 negative — so read() widens each window to int32 on the CPU instead, and the
// field says int32. Which one a build does is decided once, at compile time, by
// indexed_dtype_scalar_type() (nullopt for uint16 = widen); fields()[0].dtype and widens_uint16()
// tell at run time. Every other integer dtype is delivered as stored.

TokenWindowSource::TokenWindowSource(TokenWindowOptions options) : options_(std::move(options)) {
  const std::string where = "megatron source '" + options_.prefix + "'";
  if (options_.prefix.empty()) throw Error("megatron source: no dataset prefix given");
  if (options_.seq_len <= 0) throw Error(where + ": seq_len must be > 0, found " + std::to_string(options_.seq_len));
  dataset_ = std::make_unique<const IndexedDataset>(options_.prefix);

  const IndexedDtype dtype = dataset_->dtype();
  if (dtype == IndexedDtype::kFloat32 || dtype == IndexedDtype::kFloat64) {
    throw Error("megatron source: " + dataset_->idx_path() + " at byte offset 17: dtype " +
                std::string(indexed_dtype_name(dtype)) + " is not a token id type (integers only)");
  }
  const std::optional<at::ScalarType> scalar = dataset_->scalar_type();
  widen_ = !scalar.has_value();  // uint16 on a libtorch without at::kUInt16: Note [uint16 tokens]

  const uint64_t extra = options_.add_extra_token ? 1 : 0;
  const uint64_t total = dataset_->total_tokens();
  // Compared in uint64: seq_len + extra cannot overflow there, and passing bounds window_ by total.
  if (static_cast<uint64_t>(options_.seq_len) + extra > total) {
    throw Error(where + ": " + std::to_string(total) + " tokens are fewer than one window of seq_len " +
                std::to_string(options_.seq_len) + (extra ? " + 1" : ""));
  }
  window_ = options_.seq_len + static_cast<int64_t>(extra);
  samples_ = (total - extra) / static_cast<uint64_t>(options_.seq_len);

  FieldSpec tokens;
  tokens.name = "tokens";
  tokens.dtype = widen_ ? at::kInt : *scalar;
  tokens.shape = {window_};
  tokens.decoder = "raw";
  fields_.push_back(std::move(tokens));
}

std::string TokenWindowSource::key(uint64_t index) const {
  return dataset_->bin_path() + ":" +
         std::to_string(index * static_cast<uint64_t>(options_.seq_len) * dataset_->itemsize());
}

EncodedSample TokenWindowSource::read(uint64_t index) const {
  if (index >= samples_) {
    throw Error(describe() + ": sample " + std::to_string(index) + " is beyond its " + std::to_string(samples_) +
                " samples");
  }
  const uint64_t first = index * static_cast<uint64_t>(options_.seq_len);
  const std::span<const std::byte> bytes = dataset_->token_bytes(first, static_cast<uint64_t>(window_));

  EncodedSample sample;
  sample.index = index;
  sample.key = dataset_->bin_path() + ":" + std::to_string(first * dataset_->itemsize());
  if (widen_) {
    at::Tensor out = at::empty({window_ * static_cast<int64_t>(sizeof(int32_t))}, at::kByte);
    auto* to = static_cast<std::byte*>(out.data_ptr());
    for (int64_t i = 0; i < window_; ++i) {
      uint16_t narrow;
      std::memcpy(&narrow, bytes.data() + i * 2, sizeof(narrow));
      const int32_t wide = narrow;
      std::memcpy(to + i * 4, &wide, sizeof(wide));
    }
    sample.fields.push_back(std::move(out));
  } else {
    at::Tensor out = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
    std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
    sample.fields.push_back(std::move(out));
  }
  return sample;
}

std::string TokenWindowSource::describe() const {
  std::string dtype(indexed_dtype_name(dataset_->dtype()));
  if (widen_) dtype += " as int32";
  return "megatron(" + options_.prefix + ", " + std::to_string(dataset_->total_tokens()) + " tokens, " + dtype +
         ", seq_len=" + std::to_string(options_.seq_len) + (options_.add_extra_token ? "" : ", no extra token") + ")";
}

}  // namespace ferry
