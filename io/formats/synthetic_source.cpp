#include "ferry/io/formats/synthetic_source.h"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "ferry/io/util/dtype_names.h"
#include "ferry/io/util/splitmix64.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

// splitmix64: a tiny, fast generator whose every state is a valid seed.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_); }
  // Uniform in [0, 1) with 53 random bits.
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

uint64_t stream_seed(uint64_t seed, uint64_t index, size_t field) {
  return mix64(seed ^ mix64(index + kGoldenGamma * (static_cast<uint64_t>(field) + 1)));
}

bool is_integer(at::ScalarType dtype) { return dtype == at::kByte || dtype == at::kInt || dtype == at::kLong; }

std::pair<double, double> dtype_limits(at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte: return {0.0, 256.0};
    case at::kInt: return {-2147483648.0, 2147483648.0};
    case at::kLong: return {-9223372036854775808.0, 9223372036854775808.0};
    // Floats: the largest finite value, so no drawn value rounds to inf. float64 is drawn through
    // float (fill_range), so float's limit is its too.
    case at::kHalf: return {-65504.0, 65504.0};
    case at::kBFloat16: {
      const double max = static_cast<double>(std::numeric_limits<c10::BFloat16>::max());
      return {-max, max};
    }
    default: {
      const double max = static_cast<double>(std::numeric_limits<float>::max());
      return {-max, max};
    }
  }
}

// A bound as the config wrote it: whole numbers in full (int64's 2^63 is not "9.22337e+18").
std::string bound_text(double value) {
  std::ostringstream text;
  if (value == std::floor(value) && std::fabs(value) < 1e20) {
    text << std::fixed << std::setprecision(0) << value;
  } else {
    text << std::setprecision(17) << value;
  }
  return text.str();
}

template <typename T>
void fill_range(SplitMix64& rng, std::byte* out, int64_t numel, double low, double high) {
  if constexpr (std::is_integral_v<T>) {
    // Both bounds are whole and within [-2^63, 2^63]; the span may be 2^64 (all of int64), which
    // takes every 64-bit value. Unsigned arithmetic wraps, so base + offset lands in [low, high).
    const auto base = static_cast<uint64_t>(static_cast<int64_t>(low));
    const long double width = static_cast<long double>(high) - static_cast<long double>(low);
    const bool everything = width >= 0x1.0p64L;
    const auto span = everything ? 0 : static_cast<uint64_t>(width);
    for (int64_t i = 0; i < numel; ++i) {
      const uint64_t offset = everything ? rng.next() : rng.next() % span;
      const T value = static_cast<T>(static_cast<int64_t>(base + offset));
      std::memcpy(out + i * sizeof(T), &value, sizeof(T));
    }
  } else {
    for (int64_t i = 0; i < numel; ++i) {
      const T value = static_cast<T>(static_cast<float>(low + (high - low) * rng.unit()));
      std::memcpy(out + i * sizeof(T), &value, sizeof(T));
    }
  }
}

void fill_raw_bits(SplitMix64& rng, std::byte* out, size_t bytes) {
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const uint64_t word = rng.next();
    std::memcpy(out + i, &word, 8);
  }
  if (i < bytes) {
    const uint64_t word = rng.next();
    std::memcpy(out + i, &word, bytes - i);
  }
}

}  // namespace

SyntheticSource::SyntheticSource(SyntheticOptions options) : options_(std::move(options)) {
  std::set<std::string> names;
  for (SyntheticField& field : options_.fields) {
    const std::string where = "synthetic source: field '" + field.name + "'";
    if (field.name.empty()) throw Error("synthetic source: a field has no name");
    if (!names.insert(field.name).second) throw Error(where + " appears twice");
    if (!is_named_dtype(field.dtype)) {
      throw Error(where + ": dtype " + dtype_name(field.dtype) + " is not supported (" + dtype_names_text() + ")");
    }
    for (int64_t size : field.shape) {
      if (size < 0) throw Error(where + ": negative size in its shape");
    }
    if (field.variable) {
      int64_t row = 1;
      for (int64_t size : field.shape) row *= size;
      // Raw bytes carry a variable field's length only through their count: empty rows lose it.
      if (row == 0) throw Error(where + ": a variable-length field needs rows of at least one element");
    }
    if (field.variable && (field.min_length < 0 || field.max_length < field.min_length)) {
      throw Error(where + ": lengths must satisfy 0 <= min_length <= max_length, found " +
                  std::to_string(field.min_length) + ".." + std::to_string(field.max_length));
    }
    if (field.range) {
      const auto [low, high] = *field.range;
      const auto [min, max] = dtype_limits(field.dtype);
      // Integer bounds must be whole; float bounds finite in the dtype, or values come out inf.
      const bool whole = low == std::floor(low) && high == std::floor(high);
      if (!(high > low) || low < min || high > max || (is_integer(field.dtype) && !whole)) {
        throw Error(where + ": range [" + bound_text(low) + ", " + bound_text(high) + ") is empty or not valid for " +
                    dtype_name(field.dtype) + " (bounds within [" + bound_text(min) + ", " + bound_text(max) + "]" +
                    (is_integer(field.dtype) ? ", whole numbers" : "") + ")");
      }
    }
    FieldSpec spec;
    spec.name = field.name;
    spec.dtype = field.dtype;
    spec.shape = field.shape;
    if (field.variable) {
      spec.shape.insert(spec.shape.begin(), kVariableLength);
      spec.max_length = field.max_length;
    }
    spec.decoder = "raw";
    specs_.push_back(std::move(spec));
  }
}

at::Tensor SyntheticSource::generate(uint64_t index, size_t field, int64_t& length) const {
  const SyntheticField& spec = options_.fields[field];
  SplitMix64 rng(stream_seed(options_.seed, index, field));
  int64_t numel = 1;
  for (int64_t size : spec.shape) numel *= size;
  length = 0;
  if (spec.variable) {
    const auto choices = static_cast<uint64_t>(spec.max_length - spec.min_length + 1);
    length = spec.min_length + static_cast<int64_t>(rng.next() % choices);
    numel *= length;
  }
  const size_t element = c10::elementSize(spec.dtype);
  at::Tensor bytes = at::empty({numel * static_cast<int64_t>(element)}, at::kByte);
  auto* out = static_cast<std::byte*>(bytes.data_ptr());
  if (!spec.range && is_integer(spec.dtype)) {
    fill_raw_bits(rng, out, bytes.numel());
    return bytes;
  }
  const auto [low, high] = spec.range.value_or(std::pair{-1.0, 1.0});
  switch (spec.dtype) {
    case at::kByte: fill_range<uint8_t>(rng, out, numel, low, high); break;
    case at::kInt: fill_range<int32_t>(rng, out, numel, low, high); break;
    case at::kLong: fill_range<int64_t>(rng, out, numel, low, high); break;
    case at::kHalf: fill_range<c10::Half>(rng, out, numel, low, high); break;
    case at::kBFloat16: fill_range<c10::BFloat16>(rng, out, numel, low, high); break;
    default: fill_range<float>(rng, out, numel, low, high); break;
  }
  return bytes;
}

EncodedSample SyntheticSource::read(uint64_t index) const {
  if (index >= options_.samples) {
    throw Error("synthetic source: sample " + std::to_string(index) + " is beyond its " +
                std::to_string(options_.samples) + " samples");
  }
  EncodedSample sample;
  sample.index = index;
  sample.key = "synthetic:" + std::to_string(index);
  sample.fields.reserve(options_.fields.size());
  for (size_t field = 0; field < options_.fields.size(); ++field) {
    int64_t length = 0;
    sample.fields.push_back(generate(index, field, length));
  }
  return sample;
}

std::vector<at::Tensor> SyntheticSource::expected(uint64_t index) const {
  std::vector<at::Tensor> tensors;
  for (size_t field = 0; field < options_.fields.size(); ++field) {
    int64_t length = 0;
    const at::Tensor bytes = generate(index, field, length);
    std::vector<int64_t> shape = options_.fields[field].shape;
    if (options_.fields[field].variable) shape.insert(shape.begin(), length);
    tensors.push_back(bytes.view(options_.fields[field].dtype).view(shape));
  }
  return tensors;
}

std::string SyntheticSource::describe() const {
  return "synthetic(seed=" + std::to_string(options_.seed) + ", samples=" + std::to_string(options_.samples) +
         ", fields=" + std::to_string(options_.fields.size()) + ")";
}

}  // namespace ferry
