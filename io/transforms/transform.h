#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/io/formats/source.h"

namespace ferry {

/// A decoded sample as a transform sees it: tensors by field name, in order. A transform reads the
/// fields it needs, replaces them, adds new ones and erases others.
class SampleFields {
 public:
  SampleFields() = default;
  SampleFields(std::vector<std::string> names, std::vector<at::Tensor> tensors);

  bool has(std::string_view name) const noexcept;
  /// The field's tensor. Throws ferry::Error naming the field (and those there are) when it is absent.
  const at::Tensor& at(std::string_view name) const;
  /// Sets a field: replaces its tensor, or adds it at the end.
  void set(std::string_view name, at::Tensor tensor);
  /// Removes a field; nothing when it is absent.
  void erase(std::string_view name);
  const std::vector<std::string>& names() const noexcept { return names_; }
  const std::vector<at::Tensor>& tensors() const noexcept { return tensors_; }
  /// Moves the tensors out, in names() order.
  std::vector<at::Tensor> take() && { return std::move(tensors_); }

 private:
  std::vector<std::string> names_;
  std::vector<at::Tensor> tensors_;
};

/// A step that sees a whole decoded sample, after its fields' decoders and before it is collated:
/// tokenize a caption, move boxes with a crop, derive a mask, drop or add a field. Transforms run in
/// the config's order (`transforms:`), on the decode threads.
///
/// When the pipeline is built, output_fields() says what the transform makes of its input fields, so
/// that collate and the pinned pool are sized before any thread starts; every sample it returns is
/// then checked against that (dtype, shape, max_length), naming the transform and the sample.
///
/// apply() is called concurrently from the decode threads: it must be thread-safe (keep no mutable
/// state, or guard it). Throwing fails the sample (ferry::Error preferred), which the pipeline
/// reports with the sample's identity, or skips under `on_error: skip`, as a decoder's error.
class Transform {
 public:
  virtual ~Transform() = default;
  virtual std::string_view name() const = 0;
  /// The fields after this transform, given those before it, in the order apply() leaves them (fields
  /// it passes through keep their place). Throws ferry::Error for input it cannot take (a missing field,
  /// a dtype it does not handle). Called once, when the pipeline is built.
  virtual std::vector<FieldSpec> output_fields(const std::vector<FieldSpec>& input) const = 0;
  /// Turns one sample's fields (as output_fields()'s input declares them) into the output fields.
  /// CPU tensors in, CPU tensors out.
  virtual void apply(SampleFields& sample, const SampleContext& context) const = 0;
  /// Whether a sample comes out the same in every epoch, so that a dataset cache may keep it. A
  /// transform that draws per-epoch random numbers says no.
  virtual bool same_every_epoch() const { return true; }
  /// What its code did so far, where it runs beside the pipeline's threads (worker processes); nullopt
  /// otherwise. Thread-safe.
  virtual std::optional<UserCodeStats> user_code() const { return std::nullopt; }
  /// The fields apply() reads or changes, where it can name them; nullopt (the default): any. The fields
  /// it leaves alone may be decoded on the GPU, after the transforms ran (Note [GPU JPEG decode]).
  virtual std::optional<std::vector<std::string>> fields_used() const { return std::nullopt; }
};

/// The sample transforms a pipeline runs after the decoders, in order, and the seed of their random
/// numbers (sampler.seed; SampleContext).
struct SampleTransforms {
  std::vector<std::shared_ptr<const Transform>> list;
  uint64_t seed = 0;
};

}  // namespace ferry
