#include "ferry/stages/decode_stage.h"

#include <algorithm>
#include <sstream>

#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

std::string sizes_text(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << sizes;
  return out.str();
}

void check_decoded(const at::Tensor& tensor, const FieldSpec& spec) {
  if (!tensor.defined()) throw Error("the decoder returned no tensor");
  if (!tensor.device().is_cpu())
    throw Error("the decoder returned a tensor on " + tensor.device().str() + ", not the CPU");
  if (tensor.scalar_type() != spec.dtype) {
    throw Error("decoded dtype " + dtype_name(tensor.scalar_type()) + " but the source declares " +
                dtype_name(spec.dtype));
  }
  bool ok = tensor.dim() == static_cast<int64_t>(spec.shape.size());
  for (size_t d = 0; ok && d < spec.shape.size(); ++d) {
    ok = spec.shape[d] == kVariableLength || spec.shape[d] == tensor.size(static_cast<int64_t>(d));
  }
  if (!ok) {
    std::ostringstream declared;
    declared << "[";
    for (size_t d = 0; d < spec.shape.size(); ++d) {
      declared << (d ? ", " : "")
               << (spec.shape[d] == kVariableLength ? std::string("*") : std::to_string(spec.shape[d]));
    }
    declared << "]";
    throw Error("decoded shape " + sizes_text(tensor.sizes()) + " does not match the declared " + declared.str());
  }
  if (spec.variable() && spec.max_length && tensor.size(0) > *spec.max_length) {
    throw Error("decoded length " + std::to_string(tensor.size(0)) + " exceeds max_length " +
                std::to_string(*spec.max_length));
  }
}

}  // namespace

DecodeStage::DecodeStage(std::shared_ptr<const Source> source, const DecoderRegistry& registry,
                         const std::map<std::string, std::string, std::less<>>& decoders,
                         const FieldDecoders& instances)
    : source_(std::move(source)) {
  if (!source_) throw Error("decode stage: no source");
  const auto& specs = source_->fields();
  const auto has_field = [&](std::string_view field) {
    return std::any_of(specs.begin(), specs.end(), [&](const FieldSpec& spec) { return spec.name == field; });
  };
  for (const auto& [field, decoder] : decoders) {
    if (!has_field(field)) {
      throw Error("decoder '" + decoder + "' is set for field '" + field + "', which " + source_->describe() +
                  " does not have");
    }
  }
  for (const auto& [field, decoder] : instances) {
    if (!decoder) throw Error("no decoder (null) given for field '" + field + "'");
    if (!has_field(field)) {
      throw Error("decoder '" + std::string(decoder->name()) + "' is given for field '" + field + "', which " +
                  source_->describe() + " does not have");
    }
  }
  for (const FieldSpec& spec : specs) {
    if (const auto given = instances.find(spec.name); given != instances.end()) {
      decoders_.push_back(given->second);
      continue;
    }
    try {
      const auto chosen = decoders.find(spec.name);
      decoders_.push_back(registry.find(chosen != decoders.end() ? std::string_view(chosen->second) : spec.decoder));
    } catch (const std::exception& e) {
      throw Error("field '" + spec.name + "' of " + source_->describe() + ": " + cause_of(e));
    }
  }
}

void DecodeStage::run(SampleWork& work) {
  if (cache_ && cache_->contains(work.index())) {
    work.cached = true;
    return;
  }
  const std::vector<FieldSpec>& specs = source_->fields();
  EncodedSample encoded = source_->read(work.index());
  work.key = encoded.key;
  if (encoded.fields.size() != specs.size()) {
    throw Error(encoded.key + ": the source gave " + std::to_string(encoded.fields.size()) +
                " fields, its schema has " + std::to_string(specs.size()));
  }
  work.fields.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    try {
      work.fields[i] =
          decoders_[i]->decode_sample(encoded.fields[i], specs[i], DecodeContext{work.plan->epoch, work.index()});
      check_decoded(work.fields[i], specs[i]);
    } catch (const std::exception& e) {
      throw Error(encoded.key + ": field '" + specs[i].name + "' (decoder '" + std::string(decoders_[i]->name()) +
                  "'): " + cause_of(e));
    }
  }
}

}  // namespace ferry
