#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <ferry/io/formats/source.h>

namespace ferry::soak {

/// One field of a soak dataset. For a variable-length field, `shape` is the shape of one row (the
/// dims after the variable dim 0), which holds at least one element.
struct SoakField {
  std::string name;
  at::ScalarType dtype = at::kByte;
  std::vector<int64_t> shape;
  bool variable = false;
  int64_t min_length = 0;
  int64_t max_length = 0;
  bool max_length_known = true;  // false: the source declares no max_length (pool.slab_bytes must be set)
};

/// A soak dataset and the faults planted in it.
struct SoakData {
  uint64_t seed = 0;
  uint64_t samples = 0;
  std::vector<SoakField> fields;
  std::set<uint64_t> failing_reads;        // read() throws (a ferry::Error or, for some, a std::runtime_error)
  std::set<uint64_t> corrupted;            // read() gives bytes that the raw decoder refuses (decode fails)
  std::chrono::microseconds max_delay{0};  // each read first sleeps a pseudo-random time below this
  bool typed_fixed = false;  // fixed fields come as tensors of their dtype and shape (the raw decoder's fast path)
  bool pinned = false;       // reads give pinned host memory (CUDA only: large ones are copied in place)
};

/// The soak's dataset, generated independently of ferry's SyntheticSource: every byte of sample i,
/// field f comes from its own splitmix64 stream keyed by (seed, i, f), raw bits of any of nine dtypes
/// (uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64: NaNs and infinities
/// included, compared as bytes). truth() holds those bytes, computed once at construction; read()
/// generates them again for each call, so the pipeline never shares memory with the truth.
///
/// Keys are "sample-<index>". Thread-safe: read() is const and takes no lock.
class SoakSource : public Source {
 public:
  /// Throws ferry::Error for a field without a name, or a variable field whose rows are empty.
  /// Without `keep_truth`, truth() is not available (a source only for a pipeline to read).
  explicit SoakSource(SoakData data, bool keep_truth = true);

  const std::vector<FieldSpec>& fields() const override { return specs_; }
  uint64_t size() const override { return data_.samples; }
  EncodedSample read(uint64_t index) const override;
  std::string describe() const override;

  const SoakData& data() const noexcept { return data_; }
  /// The bytes of field `field` of sample `index`, as a pipeline must deliver them (keep_truth only).
  const std::string& truth(uint64_t index, size_t field) const { return truth_[index * data_.fields.size() + field]; }
  /// A variable field's length (rows) in sample `index`; 0 for fixed fields.
  int64_t length(uint64_t index, size_t field) const;
  /// Whether reading or decoding sample `index` fails.
  bool fails(uint64_t index) const {
    return data_.failing_reads.count(index) != 0 || data_.corrupted.count(index) != 0;
  }
  /// Bytes of one row of a variable field (or of a whole fixed field).
  size_t row_bytes(size_t field) const;

 private:
  std::string generate(uint64_t index, size_t field) const;

  SoakData data_;
  std::vector<FieldSpec> specs_;
  std::vector<std::string> truth_;
};

/// Bytes of one element of `dtype`.
size_t element_size(at::ScalarType dtype);
/// "uint8", "int16", ... for the soak's dtypes.
std::string dtype_text(at::ScalarType dtype);

}  // namespace ferry::soak
