#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ferry {

/// shape[0] of a variable-length field: its length differs from sample to sample.
inline constexpr int64_t kVariableLength = -1;

/// One field of a source's samples, as the source promises to deliver it after decoding.
struct FieldSpec {
  std::string name;
  at::ScalarType dtype = at::kByte;
  /// Per-sample shape. A variable-length field has shape[0] == kVariableLength and the fixed rest.
  std::vector<int64_t> shape;
  /// Largest length of a variable-length field; unset when not known (pool.slab_bytes must then be
  /// set, as the largest batch is unknown).
  std::optional<int64_t> max_length;
  /// Name of the decoder (see DecoderRegistry) that turns this field's encoded bytes into a tensor.
  std::string decoder = "raw";

  bool variable() const noexcept { return !shape.empty() && shape[0] == kVariableLength; }
};

/// A sample as stored: one encoded tensor per field (usually uint8 bytes), in the source's field
/// order, and a key that identifies the sample in messages ("shard-0003.tar:000123", a file path).
struct EncodedSample {
  uint64_t index = 0;
  std::string key;
  std::vector<at::Tensor> fields;
};

/// Random access to a dataset's samples.
///
/// read() is called concurrently from the decode threads, for any index in [0, size()), in any
/// order: implementations must be thread-safe and should not serialise on a lock. It throws
/// ferry::Error naming the sample (and the file and offset, where there is one) for bad data.
class Source {
 public:
  virtual ~Source() = default;
  virtual const std::vector<FieldSpec>& fields() const = 0;
  virtual uint64_t size() const = 0;
  virtual EncodedSample read(uint64_t index) const = 0;
  /// One line for reports and errors, e.g. "synthetic(seed=7, samples=10000, fields=3)".
  virtual std::string describe() const = 0;
  /// Where the samples lie in shards that are best read in order (tar files): each shard's number of
  /// samples, the shards in sample order. Shard-aware orders (sampler.shuffle_buffer) use it. Empty
  /// (the default): one collection read at random.
  virtual std::vector<uint64_t> shard_sizes() const { return {}; }
};

}  // namespace ferry
