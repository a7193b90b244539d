#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <c10/core/ScalarType.h>

#include "ferry/io/formats/indexed_dataset.h"
#include "ferry/io/formats/source.h"
#include "ferry/io/remote/data_store.h"
#include "ferry/io/util/key_schema.h"
#include "ferry/io/util/remote_options.h"

namespace ferry {

/// How a token file's integers are stored: Megatron's dtypes, and uint32 (vocabularies over 65535
/// written by numpy, as nanoGPT-style preparation scripts do).
enum class TokenType : uint8_t { kUInt8, kInt8, kUInt16, kInt16, kUInt32, kInt32, kInt64 };

/// numpy's name: "uint16", "int32", ...
std::string_view token_type_name(TokenType type) noexcept;
/// Bytes per token: 1, 2, 4 or 8.
size_t token_type_size(TokenType type) noexcept;
/// The type named `name` (numpy's names), or nullopt.
std::optional<TokenType> token_type_named(std::string_view name) noexcept;

/// Where a TokenWindowSource's windows start.
enum class TokenWindows {
  kStrided,  // window i starts at token i * seq_len: consecutive windows share one token
  kRandom,   // each sample starts at an offset drawn from (seed, epoch, index), as nanoGPT's get_batch draws
};

/// What a TokenWindowSource reads; plain values with defaults, one per config key. The tokens come
/// from a Megatron-LM indexed dataset (`prefix`) or a flat binary of tokens (`path` and `dtype`):
/// exactly one of the two is set.
struct TokenWindowOptions {
  /// Path prefix of a Megatron-LM indexed dataset: `<prefix>.idx` and `<prefix>.bin`.
  std::string prefix;
  /// Tokens per training sequence; must be > 0.
  int64_t seq_len = 2048;
  /// Each sample carries one token more than seq_len (inputs are tokens[:-1], labels tokens[1:]),
  /// as Megatron's GPTDataset does with add_extra_token_to_sequence.
  bool add_extra_token = true;
  /// A flat binary of tokens back to back, no header (nanoGPT's train.bin), and how they are stored.
  std::string path;
  TokenType type = TokenType::kUInt16;
  TokenWindows windows = TokenWindows::kStrided;
  /// Random windows in one epoch; 0: as many as there are strided windows (one epoch reads about
  /// as many tokens as the file holds).
  uint64_t samples = 0;
  /// What random windows are drawn from, with the epoch and the index (sampler.seed).
  uint64_t seed = 0;
  /// The delivered tokens' type; unset: as stored (see Note [uint16 tokens]).
  std::optional<at::ScalarType> output_dtype;
  /// Two field names: inputs (the window's first seq_len tokens) and targets (its last seq_len, one
  /// token later), each contiguous; needs add_extra_token. Empty: one field `tokens` of the window.
  std::vector<std::string> split;
  /// Packed documents (Note [packed documents]): the fields `document_ids` and `position_ids`, int64
  /// per token of the inputs (the split's first field, or the window).
  bool document_ids = false;
  bool position_ids = false;
  /// The end-of-document token, after which a new document starts; unset: a Megatron dataset's own
  /// documents (a token file then has no documents, and asks for it).
  std::optional<int64_t> eod_token;
  /// How a remote prefix or path (http://, https://, s3://) is fetched and cached (Note [remote data]).
  RemoteOptions remote;
};

/// The options of a config's `source: {kind: megatron, ...}` or `{kind: tokens, ...}` mapping, as the
/// config loader checked it; `seed` is sampler.seed.
TokenWindowOptions token_window_options(const KeyValue& source, uint64_t seed);

/// GPT-style pretraining samples from a token stream: a Megatron-LM indexed dataset's sequences
/// concatenated in order, or a flat token file, cut into windows of window = seq_len +
/// (add_extra_token ? 1 : 0) tokens. Strided: sample i is tokens [i * seq_len, i * seq_len + window),
/// so consecutive samples share one token and windows run across document boundaries (documents carry
/// their own end-of-document tokens, put there by the preprocessing); size() is (total - extra) /
/// seq_len, the last partial window dropped. Random: sample i of an epoch starts at an offset drawn
/// uniformly from [0, total - window] with (seed, epoch, i), so windows overlap anywhere and a run,
/// a resume and any thread count draw the same ones; size() is `samples`.
///
/// Fields: "tokens" of shape {window}, or the two `split` fields of shape {seq_len}; decoder "raw";
/// then `document_ids` and `position_ids` where asked.
/// read() copies (and converts, for an output dtype other than the stored one) straight from the
/// mapped file. Offsets are 64-bit: files of more than 2^31 tokens are read like small ones. Float
/// datasets are refused.
///
/// Owns: the file mappings. Construct on any thread; read() is const, lock-free, allocates the
/// sample's tensors, and may block on page faults of the mapping; it is safe from any number of
/// threads at once.
class TokenWindowSource : public Source {
 public:
  /// Opens and validates the tokens. Throws ferry::Error (naming the file, and the byte offset where
  /// there is one) for a bad dataset, a file whose size is not a whole number of tokens, a float
  /// dtype, seq_len <= 0, fewer tokens than one window, or a split without the extra token.
  explicit TokenWindowSource(TokenWindowOptions options);

  const std::vector<FieldSpec>& fields() const override { return fields_; }
  uint64_t size() const override { return samples_; }
  /// Epoch 0's sample. Throws ferry::Error for an index >= size().
  EncodedSample read(uint64_t index) const override;
  EncodedSample read_sample(uint64_t index, const SampleContext& context) const override;
  /// e.g. "megatron(/data/web, 12345678 tokens, uint16, seq_len=2048)", "tokens(train.bin, ...)".
  std::string describe() const override;
  /// "<file>:<byte offset of the window's first token>", as read() gives it; random windows, which
  /// start elsewhere every epoch: "<file>:window <index>".
  std::string key(uint64_t index) const override;
  bool same_every_epoch() const override { return options_.windows == TokenWindows::kStrided; }
  std::optional<RemoteDataStats> remote_data() const override;
  /// For a remote file read in strided windows: fetches its blocks ahead along `order`.
  std::shared_ptr<const void> read_in_order(std::shared_ptr<const ReadOrder> order) const override;

  const TokenWindowOptions& options() const noexcept { return options_; }
  /// How the file stores its tokens.
  TokenType stored() const noexcept { return type_; }
  uint64_t total_tokens() const noexcept { return total_; }
  /// Tokens per sample: seq_len + 1 with add_extra_token, else seq_len.
  int64_t window() const noexcept { return window_; }
  /// Whether read() widens uint16 tokens to int32 as stored (Note [uint16 tokens]).
  bool widens_uint16() const noexcept { return widen_; }
  /// The first token of sample `index` in `epoch`.
  uint64_t first_token(uint64_t epoch, uint64_t index) const;

 private:
  EncodedSample read_window(uint64_t index, uint64_t first, const std::atomic<bool>* stop) const;
  /// The `count` tokens from `first` on: in the mapping, or read from the remote file into a buffer of
  /// the calling thread's (valid until its next call).
  const std::byte* window_bytes(uint64_t first, uint64_t count, const std::atomic<bool>* stop) const;
  /// Where documents start in the `count` tokens from `first` (whose bytes are `from`): offsets in
  /// (0, count), ascending.
  void document_starts(uint64_t first, uint64_t count, const std::byte* from, std::vector<uint64_t>& starts) const;
  std::string file_key(uint64_t first) const;

  TokenWindowOptions options_;
  std::shared_ptr<const IndexedDataset> dataset_;  // a Megatron dataset's mappings
  std::shared_ptr<const std::byte> mapped_;        // a token file's mapping
  const std::byte* tokens_ = nullptr;              // mapped tokens; null for a remote file
  std::shared_ptr<const DataFile> remote_file_;    // a remote token file (or .bin)
  std::string file_;                               // where the tokens lie, for keys
  TokenType type_ = TokenType::kUInt16;
  uint64_t total_ = 0;
  std::vector<FieldSpec> fields_;
  int64_t window_ = 0;
  uint64_t samples_ = 0;
  uint64_t strided_ = 0;  // strided windows in the stream
  bool widen_ = false;
};

}  // namespace ferry
