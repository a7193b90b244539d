#include "tests/stress/soak/soak_source.h"

#include <cstring>
#include <optional>
#include <stdexcept>
#include <thread>

#include <ATen/ATen.h>

#include <ferry/pipeline/error.h>

namespace ferry::soak {
namespace {

// splitmix64, written out here so that the soak's truth owes nothing to ferry's generator.
struct Mix {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};

uint64_t stream(uint64_t seed, uint64_t index, uint64_t field) {
  Mix mix{seed ^ (index * 0xd1342543de82ef95ULL) ^ ((field + 1) * 0x2545f4914f6cdd1dULL)};
  return mix.next();
}

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (const int64_t size : shape) count *= size;
  return count;
}

}  // namespace

size_t element_size(at::ScalarType dtype) { return c10::elementSize(dtype); }

std::string dtype_text(at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    default: return c10::toString(dtype);
  }
}

SoakSource::SoakSource(SoakData data, bool keep_truth) : data_(std::move(data)) {
  for (const SoakField& field : data_.fields) {
    if (field.name.empty()) throw Error("soak source: a field has no name");
    if (field.variable && elements(field.shape) == 0)
      throw Error("soak source: field '" + field.name + "' has empty rows");
    FieldSpec spec;
    spec.name = field.name;
    spec.dtype = field.dtype;
    spec.shape = field.shape;
    if (field.variable) {
      spec.shape.insert(spec.shape.begin(), kVariableLength);
      if (field.max_length_known) spec.max_length = field.max_length;
    }
    spec.decoder = "raw";
    specs_.push_back(std::move(spec));
  }
  if (!keep_truth) return;
  truth_.reserve(data_.samples * data_.fields.size());
  for (uint64_t index = 0; index < data_.samples; ++index) {
    for (size_t field = 0; field < data_.fields.size(); ++field) truth_.push_back(generate(index, field));
  }
}

size_t SoakSource::row_bytes(size_t field) const {
  const SoakField& spec = data_.fields[field];
  return static_cast<size_t>(elements(spec.shape)) * element_size(spec.dtype);
}

int64_t SoakSource::length(uint64_t index, size_t field) const {
  const SoakField& spec = data_.fields[field];
  if (!spec.variable) return 0;
  const uint64_t choices = static_cast<uint64_t>(spec.max_length - spec.min_length + 1);
  return spec.min_length + static_cast<int64_t>(stream(data_.seed, index, field) % choices);
}

std::string SoakSource::generate(uint64_t index, size_t field) const {
  const SoakField& spec = data_.fields[field];
  const size_t rows = spec.variable ? static_cast<size_t>(length(index, field)) : 1;
  std::string bytes(rows * row_bytes(field), '\0');
  Mix mix{stream(data_.seed, index, field) ^ 0x5eed};
  for (size_t offset = 0; offset < bytes.size(); offset += 8) {
    const uint64_t word = mix.next();
    std::memcpy(bytes.data() + offset, &word, std::min<size_t>(8, bytes.size() - offset));
  }
  return bytes;
}

EncodedSample SoakSource::read(uint64_t index) const {
  if (index >= data_.samples) {
    throw Error("soak source: sample " + std::to_string(index) + " of " + std::to_string(data_.samples));
  }
  if (data_.max_delay.count() > 0) {
    const uint64_t hash = (index + 1) * 0x9e3779b97f4a7c15ULL;
    std::this_thread::sleep_for(
        std::chrono::microseconds((hash >> 33) % static_cast<uint64_t>(data_.max_delay.count())));
  }
  const std::string key = "sample-" + std::to_string(index);
  if (data_.failing_reads.count(index) != 0) {
    // Some as ferry::Error, some as another exception: both must reach the consumer placed.
    if (index % 3 == 0) throw std::runtime_error(key + ": planted read failure (std::runtime_error)");
    throw Error(key + ": planted read failure");
  }
  // A corrupted sample: the first field whose bytes can be made wrong for the raw decoder.
  std::optional<size_t> corrupt;
  if (data_.corrupted.count(index) != 0) {
    for (size_t f = 0; f < data_.fields.size() && !corrupt; ++f) {
      const SoakField& spec = data_.fields[f];
      if (!spec.variable || spec.max_length_known || row_bytes(f) > 1) corrupt = f;
    }
    if (!corrupt) throw Error(key + ": planted read failure (no field can hold wrong bytes)");
  }
  EncodedSample sample;
  sample.index = index;
  sample.key = key;
  for (size_t f = 0; f < data_.fields.size(); ++f) {
    const SoakField& spec = data_.fields[f];
    std::string bytes = generate(index, f);
    if (corrupt == f) {
      if (spec.variable && spec.max_length_known) {
        bytes.assign(static_cast<size_t>(spec.max_length + 1) * row_bytes(f), '\x5a');  // longer than max_length
      } else if (data_.typed_fixed && !spec.variable) {
        bytes.append(element_size(spec.dtype), '\x5a');  // one element too many
      } else {
        bytes.push_back('\x5a');  // not a whole number of elements, or of rows
      }
    }
    at::Tensor tensor = at::empty({static_cast<int64_t>(bytes.size())},
                                  at::TensorOptions().dtype(at::kByte).pinned_memory(data_.pinned));
    if (!bytes.empty()) std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
    if (data_.typed_fixed && !spec.variable) {
      tensor = tensor.view(spec.dtype);
      if (corrupt != f) tensor = tensor.view(spec.shape);
    }
    sample.fields.push_back(std::move(tensor));
  }
  return sample;
}

std::string SoakSource::describe() const {
  return "soak(seed=" + std::to_string(data_.seed) + ", samples=" + std::to_string(data_.samples) +
         ", fields=" + std::to_string(data_.fields.size()) + ")";
}

}  // namespace ferry::soak
