#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/io/formats/indexed_dataset.h"
#include "ferry/io/formats/source.h"
#include "ferry/io/util/key_schema.h"

namespace ferry {

/// What a TokenWindowSource reads; plain values with defaults, one per config key.
struct TokenWindowOptions {
  /// Path prefix of a Megatron-LM indexed dataset: `<prefix>.idx` and `<prefix>.bin`.
  std::string prefix;
  /// Tokens per training sequence; must be > 0.
  int64_t seq_len = 2048;
  /// Each sample carries one token more than seq_len (inputs are tokens[:-1], labels tokens[1:]),
  /// as Megatron's GPTDataset does with add_extra_token_to_sequence.
  bool add_extra_token = true;
};

/// The options of a config's `source: {kind: megatron, ...}` mapping, as the config loader checked it.
TokenWindowOptions megatron_options(const KeyValue& source);

/// GPT-style pretraining samples from a Megatron-LM indexed dataset: all its sequences concatenated
/// in order into one token stream, cut into windows. Sample i is tokens
/// [i * seq_len, i * seq_len + window) of the stream, window = seq_len + (add_extra_token ? 1 : 0),
/// so consecutive samples share one token and windows run across document boundaries (documents
/// carry their own end-of-document tokens, put there by the preprocessing). size() is
/// (total_tokens - extra) / seq_len: the last partial window is dropped.
///
/// One field, "tokens", shape {window}, decoder "raw": read() copies the window's bytes from the
/// mapped .bin (one memcpy; see Note [MMIDIDX layout]) into a uint8 tensor. The field keeps the
/// on-disk dtype, with one exception — see Note [uint16 tokens]. Float datasets are refused.
///
/// Owns: the IndexedDataset (its file mappings). Construct on any thread; read() is const,
/// lock-free, allocates the sample's tensor, and may block on page faults of the mapping; it is
/// safe from any number of threads at once.
class TokenWindowSource : public Source {
 public:
  /// Opens and validates the dataset. Throws ferry::Error (naming the file and byte offset) for a
  /// bad dataset, a float dtype, seq_len <= 0, or fewer tokens than one window.
  explicit TokenWindowSource(TokenWindowOptions options);

  const std::vector<FieldSpec>& fields() const override { return fields_; }
  uint64_t size() const override { return samples_; }
  /// Key "<prefix>.bin:<byte offset of the window's first token>". Throws ferry::Error for an index
  /// >= size().
  EncodedSample read(uint64_t index) const override;
  /// e.g. "megatron(/data/web, 12345678 tokens, uint16, seq_len=2048)"; "uint16 as int32" when
  /// widened.
  std::string describe() const override;
  /// "<.bin path>:<byte offset of the window>", as read() gives it.
  std::string key(uint64_t index) const override;

  const TokenWindowOptions& options() const noexcept { return options_; }
  const IndexedDataset& dataset() const noexcept { return *dataset_; }
  /// Tokens per sample: seq_len + 1 with add_extra_token, else seq_len.
  int64_t window() const noexcept { return window_; }
  /// Whether read() widens uint16 tokens to int32 (Note [uint16 tokens]).
  bool widens_uint16() const noexcept { return widen_; }

 private:
  TokenWindowOptions options_;
  std::unique_ptr<const IndexedDataset> dataset_;
  std::vector<FieldSpec> fields_;
  int64_t window_ = 0;
  uint64_t samples_ = 0;
  bool widen_ = false;
};

}  // namespace ferry
