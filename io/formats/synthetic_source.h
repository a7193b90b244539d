#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ferry/io/formats/source.h"
#include "ferry/io/util/key_schema.h"

namespace ferry {

struct SyntheticField {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  /// Per-sample shape; for a variable-length field, the shape after the variable dim 0 (which must
  /// hold at least one element: the length is recovered from the byte count).
  std::vector<int64_t> shape;
  /// A variable-length field's dim 0 is drawn per sample from [min_length, max_length].
  bool variable = false;
  int64_t min_length = 0;
  int64_t max_length = 0;
  /// Values are drawn uniformly from [low, high). Unset: floats from [-1, 1), integers from the
  /// dtype's whole range.
  std::optional<std::pair<double, double>> range;
};

struct SyntheticOptions {
  uint64_t seed = 0;
  uint64_t samples = 1024;
  std::vector<SyntheticField> fields;
};

/// The options of a config's `source: {kind: synthetic, ...}` mapping, as the config loader checked it.
SyntheticOptions synthetic_options(const KeyValue& source);

/// Deterministic samples made from (seed, index): the same pair always gives the same bytes, on any
/// machine and thread, in any order. Each field's bytes come from its own splitmix64 stream, keyed
/// by seed, sample index and field position, so a sample costs only its own generation and any
/// sample can be regenerated to check a delivered batch (expected()).
///
/// Samples are encoded as raw bytes (decoder "raw"), so the demo exercises the same decode path as
/// a real dataset. Thread-safe: read() and expected() are const and lock-free.
class SyntheticSource : public Source {
 public:
  /// Throws ferry::Error for an unusable field (no name, duplicate, unsupported dtype, negative
  /// size, bad length bounds or range).
  explicit SyntheticSource(SyntheticOptions options);

  const std::vector<FieldSpec>& fields() const override { return specs_; }
  uint64_t size() const override { return options_.samples; }
  EncodedSample read(uint64_t index) const override;
  std::string describe() const override;
  std::string key(uint64_t index) const override { return "synthetic:" + std::to_string(index); }

  /// The decoded tensors of sample `index`, in field order: what a pipeline must deliver.
  std::vector<at::Tensor> expected(uint64_t index) const;
  const SyntheticOptions& options() const noexcept { return options_; }

 private:
  /// The bytes of one field of one sample (a 1-D uint8 tensor) and its dim-0 length.
  at::Tensor generate(uint64_t index, size_t field, int64_t& length) const;

  SyntheticOptions options_;
  std::vector<FieldSpec> specs_;
};

}  // namespace ferry
