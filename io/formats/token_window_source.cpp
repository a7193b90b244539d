#include "ferry/io/formats/token_window_source.h"

#include <cstring>
#include <utility>

#include <ATen/ops/empty.h>
#include <torch/version.h>

#include "ferry/io/util/dataset_paths.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/io/util/mapped_file.h"
#include "ferry/io/util/splitmix64.h"
#include "ferry/pipeline/error.h"

namespace ferry {

// Note [uint16 tokens]
// ~~~~~~~~~~~~~~~~~~~~
// Megatron stores tokens as uint16 whenever the vocabulary has fewer than 65500 entries (nanoGPT's
// train.bin too), and keeping them 2 bytes wide through the host-to-device copy halves the bytes
// moved; the consumer widens them on the device (an embedding wants int32/int64 anyway). That needs a
// libtorch that has a uint16 tensor type: at::kUInt16 exists from libtorch 2.3 on. On an older
// libtorch (Debian's 1.13, on the CPU build machine) there is no dtype that holds 0..65535 in 2 bytes
// — int16 would turn ids above 32767 negative — so read() widens each window to int32 on the CPU
// instead, and the field says int32 (uint32 tokens likewise to int64). Which one a build does is
// decided once, at compile time (stored_scalar_type()); fields()[0].dtype and widens_uint16() tell at
// run time. Every other integer dtype is delivered as stored. An `output_dtype` (int64 for
// cross_entropy's targets) converts on the CPU while copying the window, as nanoGPT's get_batch does.

namespace {

struct TypeInfo {
  TokenType type;
  std::string_view name;
  size_t size;
};
constexpr TypeInfo kTypes[] = {
    {TokenType::kUInt8, "uint8", 1}, {TokenType::kInt8, "int8", 1},     {TokenType::kUInt16, "uint16", 2},
    {TokenType::kInt16, "int16", 2}, {TokenType::kUInt32, "uint32", 4}, {TokenType::kInt32, "int32", 4},
    {TokenType::kInt64, "int64", 8},
};

const TypeInfo& info(TokenType type) noexcept {
  for (const TypeInfo& each : kTypes) {
    if (each.type == type) return each;
  }
  return kTypes[0];
}

// The libtorch type holding the stored bytes as they are, or nullopt where this libtorch has none.
std::optional<at::ScalarType> stored_scalar_type(TokenType type) noexcept {
  switch (type) {
    case TokenType::kUInt8: return at::kByte;
    case TokenType::kInt8: return at::kChar;
    case TokenType::kInt16: return at::kShort;
    case TokenType::kInt32: return at::kInt;
    case TokenType::kInt64: return at::kLong;
    case TokenType::kUInt16:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
      return at::kUInt16;
#else
      return std::nullopt;
#endif
    case TokenType::kUInt32:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
      return at::kUInt32;
#else
      return std::nullopt;
#endif
  }
  return std::nullopt;
}

std::optional<TokenType> token_type_of(IndexedDtype dtype) noexcept {
  switch (dtype) {
    case IndexedDtype::kUInt8: return TokenType::kUInt8;
    case IndexedDtype::kInt8: return TokenType::kInt8;
    case IndexedDtype::kInt16: return TokenType::kInt16;
    case IndexedDtype::kUInt16: return TokenType::kUInt16;
    case IndexedDtype::kInt32: return TokenType::kInt32;
    case IndexedDtype::kInt64: return TokenType::kInt64;
    case IndexedDtype::kFloat32:
    case IndexedDtype::kFloat64: return std::nullopt;
  }
  return std::nullopt;
}

// Copies `count` tokens stored as From to `to` as To.
template <typename From, typename To>
void convert(const std::byte* from, std::byte* to, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    From value;
    std::memcpy(&value, from + i * sizeof(From), sizeof(From));
    const auto converted = static_cast<To>(value);
    std::memcpy(to + i * sizeof(To), &converted, sizeof(To));
  }
}

template <typename To>
void convert_from(TokenType type, const std::byte* from, std::byte* to, uint64_t count) {
  switch (type) {
    case TokenType::kUInt8: return convert<uint8_t, To>(from, to, count);
    case TokenType::kInt8: return convert<int8_t, To>(from, to, count);
    case TokenType::kUInt16: return convert<uint16_t, To>(from, to, count);
    case TokenType::kInt16: return convert<int16_t, To>(from, to, count);
    case TokenType::kUInt32: return convert<uint32_t, To>(from, to, count);
    case TokenType::kInt32: return convert<int32_t, To>(from, to, count);
    case TokenType::kInt64: return convert<int64_t, To>(from, to, count);
  }
}

// `count` tokens from `from` as a uint8 tensor of `output`'s bytes (what the raw decoder views).
at::Tensor tokens_as(TokenType type, at::ScalarType output, const std::byte* from, uint64_t count) {
  const size_t width = c10::elementSize(output);
  at::Tensor out = at::empty({static_cast<int64_t>(count * width)}, at::kByte);
  auto* to = static_cast<std::byte*>(out.data_ptr());
  if (stored_scalar_type(type) == output) {
    std::memcpy(to, from, count * width);
    return out;
  }
  switch (output) {
    case at::kLong: convert_from<int64_t>(type, from, to, count); break;
    case at::kInt: convert_from<int32_t>(type, from, to, count); break;
    default: throw Error("token windows: no conversion to " + dtype_name(output));
  }
  return out;
}

}  // namespace

std::string_view token_type_name(TokenType type) noexcept { return info(type).name; }
size_t token_type_size(TokenType type) noexcept { return info(type).size; }
std::optional<TokenType> token_type_named(std::string_view name) noexcept {
  for (const TypeInfo& each : kTypes) {
    if (each.name == name) return each.type;
  }
  return std::nullopt;
}

TokenWindowSource::TokenWindowSource(TokenWindowOptions options) : options_(std::move(options)) {
  const bool megatron = !options_.prefix.empty();
  if (megatron == !options_.path.empty()) {
    throw Error(megatron ? "token windows: both a Megatron prefix and a token file given"
                         : "megatron source: no dataset prefix given");
  }
  const std::string where =
      megatron ? "megatron source '" + options_.prefix + "'" : "tokens source '" + options_.path + "'";
  if (options_.seq_len <= 0) throw Error(where + ": seq_len must be > 0, found " + std::to_string(options_.seq_len));
  if (!options_.split.empty()) {
    if (options_.split.size() != 2 || options_.split[0].empty() || options_.split[0] == options_.split[1]) {
      throw Error(where + ": split names two different fields, inputs and targets");
    }
    if (!options_.add_extra_token) {
      throw Error(where + ": split needs add_extra_token (targets are the inputs one token later)");
    }
  }

  if (megatron) {
    dataset_ = std::make_shared<const IndexedDataset>(options_.prefix, options_.remote);
    const std::optional<TokenType> type = token_type_of(dataset_->dtype());
    if (!type) {
      throw Error("megatron source: " + dataset_->idx_path() + " at byte offset 17: dtype " +
                  std::string(indexed_dtype_name(dataset_->dtype())) + " is not a token id type (integers only)");
    }
    type_ = *type;
    total_ = dataset_->total_tokens();
    if (dataset_->mapped()) {
      tokens_ = total_ == 0 ? nullptr : dataset_->token_bytes(0, total_).data();
    } else {
      remote_file_ = dataset_->bin_file();
    }
    file_ = dataset_->bin_path();
  } else {
    type_ = options_.type;
    size_t bytes = 0;
    if (detail::is_fetched_path(options_.path)) {
      remote_file_ = DataStore::get(options_.remote)->open(options_.path, DataStore::Access::kBlocks, "token file");
      bytes = static_cast<size_t>(remote_file_->size());
    } else {
      // Windows are read at random offsets (shuffled, or drawn at random).
      mapped_ = detail::map_file(options_.path, "tokens source", detail::MappedAccess::kRandom, bytes);
    }
    const size_t width = token_type_size(type_);
    if (bytes % width != 0) {
      throw Error("tokens source: " + options_.path + " holds " + std::to_string(bytes) +
                  " bytes, not a whole number of " + std::string(token_type_name(type_)) + " tokens (" +
                  std::to_string(width) + " bytes each): is dtype right? The last " + std::to_string(bytes % width) +
                  " bytes, from byte offset " + std::to_string(bytes - bytes % width) + ", are left over");
    }
    tokens_ = mapped_.get();
    total_ = bytes / width;
    file_ = options_.path;
  }

  const std::optional<at::ScalarType> stored = stored_scalar_type(type_);
  at::ScalarType output;
  if (options_.output_dtype) {
    output = *options_.output_dtype;
    if (output != at::kLong && output != at::kInt && output != stored) {
      throw Error(where + ": output_dtype " + dtype_name(output) + " is not int32, int64 or the stored " +
                  std::string(token_type_name(type_)));
    }
  } else {
    output = stored ? *stored : (type_ == TokenType::kUInt16 ? at::kInt : at::kLong);  // Note [uint16 tokens]
    widen_ = !stored.has_value();
  }

  const uint64_t extra = options_.add_extra_token ? 1 : 0;
  // Compared in uint64: seq_len + extra cannot overflow there, and passing bounds window_ by total.
  if (static_cast<uint64_t>(options_.seq_len) + extra > total_) {
    throw Error(where + ": " + std::to_string(total_) + " tokens are fewer than one window of seq_len " +
                std::to_string(options_.seq_len) + (extra ? " + 1" : ""));
  }
  window_ = options_.seq_len + static_cast<int64_t>(extra);
  strided_ = (total_ - extra) / static_cast<uint64_t>(options_.seq_len);
  samples_ = options_.windows == TokenWindows::kRandom && options_.samples > 0 ? options_.samples : strided_;

  if (options_.split.empty()) {
    fields_.push_back(FieldSpec{.name = "tokens", .dtype = output, .shape = {window_}, .decoder = "raw"});
  } else {
    for (const std::string& name : options_.split) {
      fields_.push_back(FieldSpec{.name = name, .dtype = output, .shape = {options_.seq_len}, .decoder = "raw"});
    }
  }
  if ((options_.document_ids || options_.position_ids) && !megatron && !options_.eod_token) {
    throw Error(where + ": document_ids and position_ids need eod_token, the token that ends each document");
  }
  const int64_t inputs = options_.split.empty() ? window_ : options_.seq_len;
  for (const bool* wanted : {&options_.document_ids, &options_.position_ids}) {
    if (!*wanted) continue;
    const char* name = wanted == &options_.document_ids ? "document_ids" : "position_ids";
    fields_.push_back(FieldSpec{.name = name, .dtype = at::kLong, .shape = {inputs}, .decoder = "raw"});
  }
}

// Note [packed documents]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A window of the token stream holds the end of one document, whole documents, and the start of
// another: packed, no token spent on padding. So that a model can keep documents apart (a block-
// diagonal attention mask, positions that restart), the window can come with, per input token,
// `document_ids` (0 for the window's first document, +1 at each document start) and `position_ids`
// (0 at the window's start and at each document start, +1 per token), as Megatron-LM's
// reset_position_ids and reset_attention_mask compute them from the end-of-document token. Documents
// are a Megatron dataset's own (its .idx), or end after each `eod_token`.
void TokenWindowSource::document_starts(uint64_t first, uint64_t count, const std::byte* from,
                                        std::vector<uint64_t>& starts) const {
  starts.clear();
  if (options_.eod_token) {
    thread_local std::vector<int64_t> tokens;
    tokens.resize(count);
    convert_from<int64_t>(type_, from, reinterpret_cast<std::byte*>(tokens.data()), count);
    for (uint64_t at = 0; at + 1 < count; ++at) {
      if (tokens[at] == *options_.eod_token) starts.push_back(at + 1);
    }
    return;
  }
  // The last document that starts at or before `first`, then each one after it inside the window.
  uint64_t low = 0;
  uint64_t high = dataset_->document_count();
  while (high - low > 1) {
    const uint64_t middle = low + (high - low) / 2;
    (dataset_->document_tokens(middle).first <= first ? low : high) = middle;
  }
  for (uint64_t d = low + 1; d < dataset_->document_count(); ++d) {
    const uint64_t start = dataset_->document_tokens(d).first;
    if (start >= first + count) break;
    if (start > first && (starts.empty() || starts.back() != start - first)) starts.push_back(start - first);
  }
}

uint64_t TokenWindowSource::first_token(uint64_t epoch, uint64_t index) const {
  if (options_.windows == TokenWindows::kStrided) return index * static_cast<uint64_t>(options_.seq_len);
  // Uniform over the total - window + 1 starts, by a 64 x 64 -> 128-bit multiply (no modulo bias to
  // speak of: at most 2^-20 relative for 2^44 tokens).
  uint64_t state = SampleContext{.seed = options_.seed, .epoch = epoch, .index = index}.random_seed();
  const uint64_t starts = total_ - static_cast<uint64_t>(window_) + 1;
  __extension__ typedef unsigned __int128 Wide;  // __extension__: GCC and Clang have it; -Wpedantic knows
  return static_cast<uint64_t>((static_cast<Wide>(splitmix64(state)) * starts) >> 64);
}

std::string TokenWindowSource::file_key(uint64_t first) const {
  return file_ + ":" + std::to_string(first * token_type_size(type_));
}

std::string TokenWindowSource::key(uint64_t index) const {
  if (options_.windows == TokenWindows::kRandom) return file_ + ":window " + std::to_string(index);
  return file_key(first_token(0, index));
}

EncodedSample TokenWindowSource::read(uint64_t index) const {
  return read_sample(index, SampleContext{.seed = options_.seed, .epoch = 0, .index = index});
}

EncodedSample TokenWindowSource::read_sample(uint64_t index, const SampleContext& context) const {
  if (index >= samples_) {
    throw Error(describe() + ": sample " + std::to_string(index) + " is beyond its " + std::to_string(samples_) +
                " samples");
  }
  return read_window(index, first_token(context.epoch, index), context.stop);
}

const std::byte* TokenWindowSource::window_bytes(uint64_t first, uint64_t count, const std::atomic<bool>* stop) const {
  const size_t width = token_type_size(type_);
  if (!remote_file_) return tokens_ + first * width;
  thread_local std::vector<std::byte> buffer;
  buffer.resize(count * width);
  remote_file_->read(first * width, count * width, buffer.data(), stop);
  return buffer.data();
}

EncodedSample TokenWindowSource::read_window(uint64_t index, uint64_t first, const std::atomic<bool>* stop) const {
  const size_t width = token_type_size(type_);
  const std::byte* from = window_bytes(first, static_cast<uint64_t>(window_), stop);
  EncodedSample sample;
  sample.index = index;
  sample.key = file_key(first);
  const at::ScalarType output = fields_[0].dtype;
  if (options_.split.empty()) {
    sample.fields.push_back(tokens_as(type_, output, from, static_cast<uint64_t>(window_)));
  } else {
    const auto length = static_cast<uint64_t>(options_.seq_len);
    sample.fields.push_back(tokens_as(type_, output, from, length));
    sample.fields.push_back(tokens_as(type_, output, from + width, length));
  }
  if (options_.document_ids || options_.position_ids) {
    const auto count = static_cast<uint64_t>(options_.split.empty() ? window_ : options_.seq_len);
    thread_local std::vector<uint64_t> starts;
    document_starts(first, count, from, starts);
    at::Tensor documents = at::empty({static_cast<int64_t>(count * sizeof(int64_t))}, at::kByte);
    at::Tensor positions = at::empty({static_cast<int64_t>(count * sizeof(int64_t))}, at::kByte);
    auto* document = reinterpret_cast<int64_t*>(documents.data_ptr());
    auto* position = reinterpret_cast<int64_t*>(positions.data_ptr());
    size_t next = 0;
    int64_t current = 0;
    uint64_t start = 0;
    for (uint64_t at = 0; at < count; ++at) {
      if (next < starts.size() && starts[next] == at) {
        ++current;
        start = at;
        ++next;
      }
      document[at] = current;
      position[at] = static_cast<int64_t>(at - start);
    }
    if (options_.document_ids) sample.fields.push_back(documents);
    if (options_.position_ids) sample.fields.push_back(positions);
  }
  return sample;
}

std::string TokenWindowSource::describe() const {
  std::string type(token_type_name(type_));
  const at::ScalarType output = fields_[0].dtype;
  if (stored_scalar_type(type_) != output) type += " as " + dtype_name(output);
  std::string text = (dataset_ ? "megatron(" + options_.prefix : "tokens(" + options_.path) + ", " +
                     std::to_string(total_) + " tokens, " + type + ", seq_len=" + std::to_string(options_.seq_len);
  if (!options_.add_extra_token) text += ", no extra token";
  if (options_.windows == TokenWindows::kRandom) text += ", " + std::to_string(samples_) + " random windows";
  if (!options_.split.empty()) text += ", split " + options_.split[0] + "/" + options_.split[1];
  return text + ")";
}

namespace {

// The blocks of a remote token file that a run's strided windows read, in its order. Holds copies of what
// it needs (each block's extent): the cache's threads may use it a moment after the source is gone, and
// must not be the last to hold the file, whose store owns them.
class WindowFetchOrder : public FetchOrder {
 public:
  WindowFetchOrder(std::vector<uint32_t> blocks, uint64_t block_bytes, std::shared_ptr<const ReadOrder> order,
                   uint64_t window_bytes, uint64_t stride_bytes)
      : blocks_(std::move(blocks)),
        block_(block_bytes),
        order_(std::move(order)),
        window_(window_bytes),
        stride_(stride_bytes) {}
  bool extents_at(uint64_t step, std::vector<uint32_t>& out) const override {
    if (step >= order_->steps()) return false;
    if (const std::optional<uint64_t> sample = order_->sample_at_step(step); sample && !blocks_.empty()) {
      const uint64_t first = *sample * stride_;
      const uint64_t last = std::min<uint64_t>((first + window_ - 1) / block_, blocks_.size() - 1);
      for (uint64_t b = first / block_; b <= last; ++b) out.push_back(blocks_[b]);
    }
    return true;
  }
  uint64_t reached() const override { return order_->reached(); }

 private:
  std::vector<uint32_t> blocks_;
  uint64_t block_;
  std::shared_ptr<const ReadOrder> order_;
  uint64_t window_, stride_;
};

}  // namespace

std::optional<RemoteDataStats> TokenWindowSource::remote_data() const {
  if (!remote_file_) return std::nullopt;
  return DataStore::get(options_.remote)->stats();
}

std::shared_ptr<const void> TokenWindowSource::read_in_order(std::shared_ptr<const ReadOrder> order) const {
  // Random windows start elsewhere every epoch, which the order (samples, not epochs) does not say:
  // their blocks are fetched as they are read.
  if (!remote_file_ || options_.windows != TokenWindows::kStrided) return nullptr;
  const uint64_t width = token_type_size(type_);
  const size_t readers = order->readers();
  const uint64_t block = std::max<uint64_t>(1, options_.remote.block_bytes);
  std::vector<uint32_t> blocks;  // one extent a block, as the file was opened (DataStore::Access::kBlocks)
  for (uint64_t offset = 0; offset < remote_file_->size(); offset += block) remote_file_->extents(offset, 1, blocks);
  auto fetch_order = std::make_shared<WindowFetchOrder>(std::move(blocks), block, std::move(order),
                                                        static_cast<uint64_t>(window_) * width,
                                                        static_cast<uint64_t>(options_.seq_len) * width);
  DataStore::get(options_.remote)->cache().follow(fetch_order, readers);
  return fetch_order;
}

}  // namespace ferry
