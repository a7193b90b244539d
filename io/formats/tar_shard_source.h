#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/io/formats/source.h"
#include "ferry/io/formats/tar_index.h"
#include "ferry/io/remote/data_store.h"
#include "ferry/io/util/key_schema.h"
#include "ferry/io/util/remote_options.h"

namespace ferry {

/// One field of a tar-shard dataset: which member of each sample feeds it and how it decodes.
struct TarField {
  std::string name;
  /// The member's extension, compared lower-cased, without the leading dot: "jpg", "seg.png", "cls".
  std::string extension;
  at::ScalarType dtype = at::kByte;
  /// Decoded per-sample shape (shape[0] == kVariableLength for a variable first dim). Default: bytes.
  std::vector<int64_t> shape = {kVariableLength};
  std::optional<int64_t> max_length;
  std::string decoder = "raw";
  /// A sample without this member is not an error: the field is zeros (a variable-length one empty),
  /// and the field `<name>_present` (bool, shape []) says which samples had it.
  bool optional = false;
  /// Other extensions the member may have, tried in order where a sample has no `extension` member
  /// (LAION-style shards hold .jpg, .jpeg, .png or .webp images): the first one a sample has is read.
  std::vector<std::string> alternatives;
};

struct TarShardOptions {
  /// Shards, read in this order (see TarShardSource::expand_braces for "shard-{000..009}.tar"): local
  /// paths, http://, https:// or s3:// URLs, or `pipe:COMMAND`; compressed ones (gzip, zstd, xz) too.
  std::vector<std::string> shards;
  /// Empty: one field per extension of the first sample (see TarShardSource's class comment).
  std::vector<TarField> fields;
  /// How remote, compressed and piped shards are fetched and cached (Note [remote data]).
  RemoteOptions remote;
};

/// The options of a config's `source: {kind: tar, ...}` mapping, as the config loader checked it: its
/// shards with their {a..b} ranges expanded, its members as fields.
TarShardOptions tar_options(const KeyValue& source);

/// Samples of WebDataset tar shards (see Note [Tar scanning] in tar_index.cpp for the format).
///
/// In: shard paths and fields. The constructor indexes every shard (headers only, shards in
/// parallel on the TBB pool), validates the fields, and throws ferry::Error for an unreadable or
/// malformed shard (file, member, byte offset) or a bad field. Out: read(i) gives sample i — samples
/// numbered over all shards in the order given, shard 0's first — with one 1-D uint8 tensor per field
/// holding the member's bytes as stored; the field's decoder turns them into its dtype and shape. An
/// optional field's member that a sample lacks is an undefined tensor (Source: absent), and its flag
/// field `<name>_present` follows it.
/// Keys are "<shard path>:<member key>" ("data/shard-000003.tar:000123").
///
/// Default fields (options.fields empty), named after the extension, from the first sample's members:
/// "cls", "cls2", "class", "count", "index", "inx", "id" -> decoder "label", int64 scalar; anything else
/// (images, .txt, .json, ...) -> decoder "raw", uint8 bytes of variable length, no max_length: images
/// stay encoded until a field names an image decoder. Default fields are all required.
///
/// Thread-safe: read() is const and takes no lock for a local shard (pread into a fresh tensor); called
/// from the decode threads. Owns one open file per local shard (TarIndex) and the index, about 32 bytes
/// a member; remote, compressed and piped shards are read from the DataStore's cache, fetched ahead in
/// the run's order.
class TarShardSource : public Source {
 public:
  /// Blocks on file I/O while indexing. Throws ferry::Error for no shards, a shard that fails to
  /// index, no samples at all, a field without name or extension, a duplicate name, a bad shape, or a
  /// required field whose extension no shard has.
  explicit TarShardSource(TarShardOptions options);

  const std::vector<FieldSpec>& fields() const override { return specs_; }
  uint64_t size() const override { return shard_begin_.back(); }
  /// Thread-safe, lock-free; blocks on I/O; allocates one tensor per field. Throws ferry::Error for
  /// an index out of range, a sample without a required member (naming the shard, the key and the
  /// extension: a per-sample problem, so `on_error: skip` skips it) or a failed read.
  EncodedSample read(uint64_t index) const override;
  /// read(), giving up a wait for a shard's fetch when the pipeline stops.
  EncodedSample read_sample(uint64_t index, const SampleContext& context) const override;
  std::optional<RemoteDataStats> remote_data() const override;
  /// Fetches remote, compressed and piped shards ahead along `order` (Note [the shard cache]).
  std::shared_ptr<const void> read_in_order(std::shared_ptr<const ReadOrder> order) const override;
  /// "tar(3 shards, 3000 samples, fields=jpg,cls)": the fields' extensions.
  std::string describe() const override;
  /// "<shard path>:<member key>", as read() gives it.
  std::string key(uint64_t index) const override;
  /// Each shard's number of samples, in the order the shards were given.
  std::vector<uint64_t> shard_sizes() const override;

  /// The fields as resolved (the defaults when options.fields was empty).
  const std::vector<TarField>& tar_fields() const noexcept { return options_.fields; }

  /// Shard ranges for shard-aware samplers: shard s holds samples [shard_samples(s).begin, .end).
  struct SampleRange {
    uint64_t begin = 0;
    uint64_t end = 0;
    uint64_t size() const noexcept { return end - begin; }
  };
  size_t shard_count() const noexcept { return shards_.size(); }
  /// Throws ferry::Error for an index out of range. O(log shards).
  size_t shard_of(uint64_t index) const;
  /// Throws ferry::Error for a shard out of range.
  SampleRange shard_samples(size_t shard) const;
  const TarIndex& shard(size_t shard) const;

  /// Expands brace groups as WebDataset (braceexpand) does: "{000000..000009}" is a numeric range,
  /// zero-padded to the wider bound when either bound has a leading zero, ascending or descending;
  /// "{a,b}" is a list; several groups give every combination, left to right. No nesting.
  /// "data/shard-{000..002}.tar" -> data/shard-000.tar, data/shard-001.tar, data/shard-002.tar.
  /// Throws ferry::Error for an unbalanced or nested brace or more than a million results.
  static std::vector<std::string> expand_braces(std::string_view pattern);

 private:
  EncodedSample read_at(uint64_t index, const std::atomic<bool>* stop) const;

  TarShardOptions options_;
  std::shared_ptr<DataStore> store_;
  std::vector<FieldSpec> specs_;
  std::vector<TarIndex> shards_;
  std::vector<uint64_t> shard_begin_{0};  // shard s holds [shard_begin_[s], shard_begin_[s + 1])
  /// Per shard, per field: the ids in that shard of the field's extensions (the first, then the
  /// alternatives) that some member there has, in the field's order.
  std::vector<std::vector<std::vector<uint32_t>>> extension_ids_;
  /// Per field: its place among specs_ (an optional field is followed by its `_present` flag).
  std::vector<size_t> spec_of_;
};

}  // namespace ferry
