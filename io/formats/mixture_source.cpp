#include "ferry/io/formats/mixture_source.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

std::string fields_text(const std::vector<FieldSpec>& fields) {
  std::string text;
  for (const FieldSpec& field : fields) {
    text += (text.empty() ? "" : ", ") + field.name + ": " + dtype_name(field.dtype) + " [";
    for (size_t d = 0; d < field.shape.size(); ++d) {
      text += (d ? ", " : "") + (field.shape[d] == kVariableLength ? std::string("*") : std::to_string(field.shape[d]));
    }
    text += "] (" + field.decoder + ")";
  }
  return text;
}

bool same_fields(const std::vector<FieldSpec>& a, const std::vector<FieldSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape ||
        a[i].decoder != b[i].decoder) {
      return false;
    }
  }
  return true;
}

std::vector<double> weights_of(const std::vector<MixturePart>& parts) {
  std::vector<double> weights;
  for (const MixturePart& part : parts) weights.push_back(part.weight);
  return weights;
}

std::string weight_text(double weight) {
  std::ostringstream out;
  out << weight;
  return out.str();
}

}  // namespace

MixtureSource::MixtureSource(std::vector<MixturePart> parts, MixtureSchedule::Mode mode, uint64_t samples)
    : parts_(std::move(parts)) {
  if (parts_.empty()) throw Error("mixture: no sources to mix");
  offsets_.push_back(0);
  for (size_t k = 0; k < parts_.size(); ++k) {
    const std::shared_ptr<const Source>& source = parts_[k].source;
    if (!source) throw Error("mixture: source " + std::to_string(k) + " is null");
    if (source->size() == 0)
      throw Error("mixture: source " + std::to_string(k) + " (" + source->describe() + ") has no samples");
    if (!same_fields(source->fields(), parts_.front().source->fields())) {
      throw Error("mixture: the sources' fields differ: source 0 (" + parts_.front().source->describe() + ") has " +
                  fields_text(parts_.front().source->fields()) + "; source " + std::to_string(k) + " (" +
                  source->describe() + ") has " + fields_text(source->fields()));
    }
    offsets_.push_back(offsets_.back() + source->size());
  }
  schedule_ = std::make_shared<const MixtureSchedule>(weights_of(parts_), mode);
  samples_ = samples > 0 ? samples : offsets_.back();
}

size_t MixtureSource::part_of(uint64_t index) const {
  if (index >= size()) {
    throw Error(describe() + ": sample " + std::to_string(index) + " is beyond its " + std::to_string(size()) +
                " samples");
  }
  return static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), index) - offsets_.begin()) - 1;
}

EncodedSample MixtureSource::read(uint64_t index) const {
  const size_t part = part_of(index);
  EncodedSample sample = parts_[part].source->read(index - offsets_[part]);
  sample.index = index;
  return sample;
}

EncodedSample MixtureSource::read_sample(uint64_t index, const SampleContext& context) const {
  const size_t part = part_of(index);
  SampleContext inner = context;
  inner.index = index - offsets_[part];
  EncodedSample sample = parts_[part].source->read_sample(inner.index, inner);
  sample.index = index;
  return sample;
}

std::string MixtureSource::key(uint64_t index) const {
  const size_t part = part_of(index);
  return parts_[part].source->key(index - offsets_[part]);
}

bool MixtureSource::same_every_epoch() const {
  return std::all_of(parts_.begin(), parts_.end(),
                     [](const MixturePart& part) { return part.source->same_every_epoch(); });
}

std::string MixtureSource::describe() const {
  std::string text =
      "mix(" + std::string(schedule_->mode() == MixtureSchedule::Mode::kMegatron ? "megatron" : "smooth");
  for (const MixturePart& part : parts_) text += "; " + weight_text(part.weight) + ": " + part.source->describe();
  return text + ")";
}

std::vector<SourcePartStats> MixtureSource::mixed_parts() const {
  double total = 0;
  for (const MixturePart& part : parts_) total += part.weight;
  std::vector<SourcePartStats> parts;
  for (const MixturePart& part : parts_) parts.push_back({part.source->describe(), part.weight / total, 0});
  return parts;
}

namespace {

// A mixture's order as one part sees it: the steps that read that part, in its own indices.
class PartOrder : public ReadOrder {
 public:
  PartOrder(std::shared_ptr<const ReadOrder> order, std::vector<uint64_t> offsets, size_t part)
      : order_(std::move(order)), offsets_(std::move(offsets)), part_(part) {}
  uint64_t steps() const override { return order_->steps(); }
  std::optional<uint64_t> sample_at_step(uint64_t step) const override {
    const std::optional<uint64_t> sample = order_->sample_at_step(step);
    if (!sample || *sample < offsets_[part_] || *sample >= offsets_[part_ + 1]) return std::nullopt;
    return *sample - offsets_[part_];
  }
  uint64_t reached() const override { return order_->reached(); }
  size_t readers() const override { return order_->readers(); }

 private:
  std::shared_ptr<const ReadOrder> order_;
  std::vector<uint64_t> offsets_;
  size_t part_;
};

}  // namespace

std::optional<RemoteDataStats> MixtureSource::remote_data() const {
  for (const MixturePart& part : parts_) {
    if (std::optional<RemoteDataStats> stats = part.source->remote_data()) return stats;
  }
  return std::nullopt;
}

std::shared_ptr<const void> MixtureSource::read_in_order(std::shared_ptr<const ReadOrder> order) const {
  auto handles = std::make_shared<std::vector<std::shared_ptr<const void>>>();
  for (size_t p = 0; p < parts_.size(); ++p) {
    if (auto handle = parts_[p].source->read_in_order(std::make_shared<PartOrder>(order, offsets_, p))) {
      handles->push_back(std::move(handle));
    }
  }
  return handles->empty() ? nullptr : handles;
}

}  // namespace ferry
