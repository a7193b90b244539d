#include "ferry/stages/collate_stage.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <sstream>

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/align_up.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/field_loop.h"

namespace ferry {
namespace {

std::string sizes_text(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << sizes;
  return out.str();
}

int64_t product(at::IntArrayRef sizes, size_t from) {
  int64_t n = 1;
  for (size_t d = from; d < sizes.size(); ++d) n *= sizes[d];
  return n;
}

}  // namespace

CollateStage::CollateStage(std::vector<FieldSpec> fields, const CollateOptions& options, size_t min_alignment)
    : fields_(std::move(fields)), min_alignment_(min_alignment) {
  if (min_alignment_ == 0 || (min_alignment_ & (min_alignment_ - 1)) != 0) {
    throw Error("collate: min_alignment must be a power of two, found " + std::to_string(min_alignment_));
  }
  for (const auto& [name, value] : options.pad_values) {
    bool known = false;
    for (const FieldSpec& spec : fields_) known = known || (spec.name == name && spec.variable());
    if (!known) throw Error("collate.pad_values: '" + name + "' is not a variable-length field of the source");
  }
  const auto flags = [&](const std::vector<std::string>& names, const char* key) {
    std::vector<bool> set(fields_.size(), false);
    for (const std::string& name : names) {
      const auto found =
          std::find_if(fields_.begin(), fields_.end(), [&](const FieldSpec& spec) { return spec.name == name; });
      if (found == fields_.end()) {
        std::string known;
        for (const FieldSpec& spec : fields_) known += (known.empty() ? "" : ", ") + spec.name;
        throw Error(std::string("collate.") + key + ": the samples have no field '" + name +
                    "' (their fields: " + known + ")");
      }
      set[static_cast<size_t>(found - fields_.begin())] = true;
    }
    return set;
  };
  list_ = flags(options.lists, "lists");
  host_ = flags(options.host, "host");
  std::vector<std::string> names;
  for (size_t f = 0; f < fields_.size(); ++f) {
    const FieldSpec& spec = fields_[f];
    if (list_[f] && host_[f]) {
      throw Error("collate: field '" + spec.name + "' is in both lists and host: a list is delivered on the device");
    }
    const bool varies_inside =
        std::count(spec.shape.begin(), spec.shape.end(), kVariableLength) > (spec.variable() ? 1 : 0);
    if (varies_inside && !list_[f]) {
      throw Error("collate: field '" + spec.name + "' varies in a size other than its first, so its samples " +
                  "neither stack nor pad: deliver it as a list (collate.lists: [" + spec.name + "])");
    }
    first_output_.push_back(names.size());
    names.push_back(spec.name);
    if (spec.variable() && !list_[f]) names.push_back(spec.name + options.lengths_suffix);

    if (c10::elementSize(spec.dtype) > sizeof(std::array<std::byte, 8>)) {
      throw Error("collate: field '" + spec.name + "' has " + std::string(c10::toString(spec.dtype)) +
                  " elements, wider than the 8 bytes ferry batches");
    }
    std::array<std::byte, 8> pad{};
    if (spec.variable() && !list_[f]) {
      const auto custom = options.pad_values.find(spec.name);
      const double value = custom != options.pad_values.end() ? custom->second : options.pad_value;
      try {
        pad = pad_element(value, spec.dtype);
      } catch (const Error& e) {
        throw Error("collate: field '" + spec.name + "': " + e.what());
      }
    }
    pads_.push_back(pad);
  }
  schema_ = std::make_shared<const BatchSchema>(std::move(names));
}

std::array<std::byte, 8> CollateStage::pad_element(double value, at::ScalarType dtype) {
  std::array<std::byte, 8> pad{};
  if (c10::elementSize(dtype) > pad.size()) throw Error("no pad element for " + dtype_name(dtype));
  try {
    // Exactly as torch::full converts, and refuses out-of-range values.
    const at::Tensor element = at::full({1}, value, at::TensorOptions().dtype(dtype));
    std::memcpy(pad.data(), element.data_ptr(), element.nbytes());
  } catch (const std::exception& e) {
    std::ostringstream text;
    text << "pad value " << std::setprecision(17) << value << " does not fit " << dtype_name(dtype);
    throw Error(text.str());
  }
  return pad;
}

std::optional<size_t> CollateStage::max_batch_bytes(size_t batch_size) const {
  // In 128 bits: a config's shapes may multiply past 64 (the loader bounds each dimension, not the
  // product), and a wrapped size would pass the slab check.
  __extension__ typedef unsigned __int128 Wide;  // __extension__: GCC and Clang have it; -Wpedantic knows
  Wide cursor = 0;
  for (size_t f = 0; f < fields_.size(); ++f) {
    const FieldSpec& spec = fields_[f];
    if (host_[f]) continue;  // not in the buffer
    const bool varies = std::count(spec.shape.begin(), spec.shape.end(), kVariableLength) > 0;
    if (varies && !spec.max_length) return std::nullopt;
    const size_t element = c10::elementSize(spec.dtype);
    // max_length bounds the product of the sizes that vary (an image's pixels, a field's rows).
    Wide slot = element * static_cast<Wide>(varies ? *spec.max_length : 1);
    for (size_t d = 0; d < spec.shape.size() && slot <= kMaxBatchBytes; ++d) {
      if (spec.shape[d] != kVariableLength) slot *= static_cast<uint64_t>(spec.shape[d]);
    }
    const Wide alignment = std::max(min_alignment_, element);
    cursor = (cursor + alignment - 1) / alignment * alignment + std::min<Wide>(slot, kMaxBatchBytes + 1) * batch_size;
    if (spec.variable() && !list_[f]) {
      const Wide lengths_alignment = std::max(min_alignment_, sizeof(int64_t));
      cursor = (cursor + lengths_alignment - 1) / lengths_alignment * lengths_alignment + sizeof(int64_t) * batch_size;
    }
    if (cursor > kMaxBatchBytes) {
      throw Error("a batch of " + std::to_string(batch_size) + " samples can exceed 256 TiB (field '" + spec.name +
                  "'): no slab can hold it");
    }
  }
  return static_cast<size_t>(cursor);
}

std::vector<SamplePlacer::Field> CollateStage::leading_fixed_fields() const {
  std::vector<SamplePlacer::Field> leading;
  for (size_t f = 0; f < fields_.size(); ++f) {
    const FieldSpec& spec = fields_[f];
    if (spec.variable() || list_[f] || host_[f] || leading.size() == SamplePlacer::kMaxFields) break;
    const size_t element = c10::elementSize(spec.dtype);
    leading.push_back(
        SamplePlacer::Field{static_cast<size_t>(product(spec.shape, 0)) * element, std::max(min_alignment_, element)});
  }
  return leading;
}

// One sample's shape for field f: its decoded tensor's sizes, or, for a cached sample, the spec's shape with
// its kept length, or, for a placed field, the spec's shape, made in `scratch`.
at::IntArrayRef CollateStage::shape_of(const SampleWork& sample, size_t f, at::DimVector& scratch) const {
  // A placed field (Note [placing samples]) has the spec's fixed shape: DecodeStage checked it.
  if (!sample.cached && !sample.is_placed(f)) return sample.fields.at(f).sizes();
  const FieldSpec& spec = fields_[f];
  scratch.assign(spec.shape.begin(), spec.shape.end());
  if (spec.variable()) scratch[0] = cache_->rows(sample.index(), f);
  return scratch;
}

void CollateStage::lay_out_list(size_t f, const std::vector<std::shared_ptr<SampleWork>>& samples,
                                FieldLayout& field) const {
  const FieldSpec& spec = fields_[f];
  const size_t element = c10::elementSize(spec.dtype);
  field.dtype = spec.dtype;
  field.source_field = static_cast<int>(f);
  field.list_offsets.reserve(samples.size());
  field.list_shapes.reserve(samples.size());
  at::DimVector scratch;
  size_t cursor = 0;
  for (const auto& sample : samples) {
    const at::IntArrayRef shape = shape_of(*sample, f, scratch);
    bool same = shape.size() == spec.shape.size();
    for (size_t d = 0; same && d < shape.size(); ++d)
      same = spec.shape[d] == kVariableLength || shape[d] == spec.shape[d];
    if (!same) {
      throw Error("field '" + spec.name + "': sample " + std::to_string(sample->index()) + " has shape " +
                  sizes_text(shape) + ", which its declared shape does not allow");
    }
    field.list_offsets.push_back(cursor);
    field.list_shapes.emplace_back(shape.begin(), shape.end());
    cursor += static_cast<size_t>(product(shape, 0)) * element;
  }
  field.shape = {static_cast<int64_t>(cursor / element)};
  field.bytes = cursor;
}

// A host field's samples stacked (padded to the longest with the pad value, for a variable-length one)
// into a CPU tensor of `field`'s shape.
at::Tensor CollateStage::collate_on_host(size_t f, const std::vector<std::shared_ptr<SampleWork>>& samples,
                                         const FieldLayout& field) const {
  at::Tensor out = at::empty(field.shape, at::TensorOptions().dtype(field.dtype));
  auto* base = static_cast<std::byte*>(out.data_ptr());
  const size_t element = c10::elementSize(field.dtype);
  for (size_t s = 0; s < samples.size(); ++s) {
    // A field decoded on the GPU (Note [GPU JPEG decode]) comes back to the host first.
    const at::Tensor tensor = samples[s]->fields.at(f).cpu().contiguous();
    const size_t bytes = tensor.nbytes();
    std::byte* slot = base + s * field.slot_bytes;
    if (bytes != 0) std::memcpy(slot, tensor.data_ptr(), bytes);
    for (size_t at = bytes; at < field.slot_bytes; at += element) std::memcpy(slot + at, field.pad.data(), element);
  }
  return out;
}

void CollateStage::lay_out(size_t f, const std::vector<std::shared_ptr<SampleWork>>& samples, FieldLayout& field,
                           FieldLayout* lengths) const {
  if (list_[f]) return lay_out_list(f, samples, field);
  const FieldSpec& spec = fields_[f];
  const size_t element = c10::elementSize(spec.dtype);
  const auto batch = static_cast<int64_t>(samples.size());
  at::DimVector first_scratch;
  at::DimVector scratch;
  const at::IntArrayRef first = shape_of(*samples.front(), f, first_scratch);
  field.dtype = spec.dtype;
  field.source_field = static_cast<int>(f);

  // Every sample must agree on the shape (fixed fields) or on the shape after dim 0 (variable ones).
  const size_t from = spec.variable() ? 1 : 0;
  int64_t longest = spec.variable() ? first[0] : 0;
  for (size_t s = 1; s < samples.size(); ++s) {
    const at::IntArrayRef shape = shape_of(*samples[s], f, scratch);
    bool same = shape.size() == first.size();
    for (size_t d = from; same && d < first.size(); ++d) same = shape[d] == first[d];
    if (!same) {
      throw Error("field '" + spec.name + "': sample " + std::to_string(samples[s]->index()) + " has shape " +
                  sizes_text(shape) + " but sample " + std::to_string(samples.front()->index()) + " has " +
                  sizes_text(first) +
                  (spec.variable() ? std::string(" (only dim 0 may differ)")
                                   : std::string(" (declare the field variable-length, or resize it)")));
    }
    if (spec.variable()) longest = std::max(longest, shape[0]);
  }

  field.shape.clear();
  field.shape.reserve(first.size() + 1);
  field.shape.push_back(batch);
  if (spec.variable()) field.shape.push_back(longest);
  for (size_t d = from; d < first.size(); ++d) field.shape.push_back(first[d]);
  field.slot_bytes = static_cast<size_t>((spec.variable() ? longest : 1) * product(first, from)) * element;
  field.bytes = field.slot_bytes * static_cast<size_t>(batch);
  field.padded = spec.variable();
  field.pad = pads_[f];

  if (lengths != nullptr) {
    lengths->dtype = at::kLong;
    lengths->shape = {batch};
    lengths->bytes = sizeof(int64_t) * static_cast<size_t>(batch);
    lengths->made = at::empty({batch}, at::kLong);
    auto* out = lengths->made.data_ptr<int64_t>();
    for (int64_t s = 0; s < batch; ++s) out[s] = shape_of(*samples[static_cast<size_t>(s)], f, scratch)[0];
    lengths->host = host_[f];
  }
  if (host_[f]) {
    field.host = true;
    field.made = collate_on_host(f, samples, field);
  }
}

void CollateStage::run(BatchWork& work, const std::atomic<bool>& /*stop*/) {
  BatchLayout& layout = work.layout;
  layout.schema = schema_;
  layout.fields.assign(schema_->size(), FieldLayout{});
  // Each field's layout but its offset, field by field or, for a wide batch, on several threads at once
  // (Note [wide batches]); then the offsets, in order.
  for_each_field(fields_.size(), [&](size_t f) {
    const size_t at = first_output_[f];
    lay_out(f, work.samples, layout.fields[at], fields_[f].variable() && !list_[f] ? &layout.fields[at + 1] : nullptr);
  });
  size_t cursor = 0;
  for (FieldLayout& field : layout.fields) {
    if (field.host) continue;  // not in the buffer
    const size_t element = c10::elementSize(field.dtype);
    field.offset = align_up(cursor, std::max(min_alignment_, element));
    cursor = field.offset + field.bytes;
  }
  layout.total_bytes = cursor;
}

}  // namespace ferry
