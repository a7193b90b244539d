#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/io/formats/source.h"

namespace ferry {

/// Which sample a decode is for. Random augmentations draw from (seed, epoch, index) so that a sample
/// gets another crop every epoch, yet the same one on every run and after a resume.
struct DecodeContext {
  uint64_t epoch = 0;
  uint64_t index = 0;  // the sample's index in its source
  /// Where a decoder with companions() puts their tensors, in that order; null where nobody asks for
  /// them (a bare decode).
  std::vector<at::Tensor>* companions = nullptr;
};

/// Turns one encoded field of one sample into a tensor of spec.dtype whose shape matches spec.shape
/// (any length in dim 0 for a variable-length field). Called concurrently from the decode threads:
/// decode() must be thread-safe. Throws (ferry::Error preferred) for input it cannot decode; the
/// pipeline adds the sample's identity and the field is named by the decode stage.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::string_view name() const = 0;
  virtual at::Tensor decode(const at::Tensor& encoded, const FieldSpec& spec) const = 0;
  /// What the decode stage calls: decode() for the sample `context` names. Decoders that draw random
  /// numbers override it; the others need not. One whose result depends on context.epoch must also
  /// override same_every_epoch() to say no, or a dataset cache keeps its first epoch's result.
  virtual at::Tensor decode_sample(const at::Tensor& encoded, const FieldSpec& spec,
                                   const DecodeContext& context) const {
    (void)context;
    return decode(encoded, spec);
  }
  /// Whether decode_sample() gives a sample the same tensor in every epoch, so that a dataset cache
  /// may keep it (Note [dataset cache]). A decoder that draws per-epoch random numbers says no.
  virtual bool same_every_epoch() const { return true; }
  /// The fields it makes beside the one it decodes (an image decoder's `<field>_window`), given that
  /// field's spec: the pipeline adds them after the source's fields, and decode_sample() gives their
  /// tensors through DecodeContext::companions. None by default.
  virtual std::vector<FieldSpec> companions(const FieldSpec& spec) const {
    (void)spec;
    return {};
  }
};

/// Decoder instances by field name, handed to make_pipeline() and the decode stage beside the names
/// that DecoderRegistry resolves. For decoders configured per pipeline (a JpegDecoder with a resize
/// and crop): registering each under a made-up global name would make two pipelines with different
/// options in one process clash, or leak names for the process's lifetime.
using FieldDecoders = std::map<std::string, std::shared_ptr<const Decoder>, std::less<>>;

}  // namespace ferry
