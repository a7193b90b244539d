#pragma once

#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/io/decoders/decoder.h"

namespace ferry {

/// Decoders by name. Sources name a decoder per field; the decode stage resolves the names once,
/// when the pipeline is built, so a misspelt decoder fails before any thread starts.
/// Thread-safe: lookups share a lock, additions take it exclusively.
class DecoderRegistry {
 public:
  /// A registry with the built-in decoders: "raw", "jpeg" (RGB, no resize), "npy", "label", "json".
  DecoderRegistry();
  /// The process-wide registry make_pipeline() uses; add your own decoders to it.
  static DecoderRegistry& global();

  /// Throws ferry::Error if a decoder of that name is already registered.
  void add(std::shared_ptr<const Decoder> decoder);
  /// Throws ferry::Error naming the unknown decoder and the registered ones.
  std::shared_ptr<const Decoder> find(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  mutable std::shared_mutex mutex_;
  std::vector<std::shared_ptr<const Decoder>> decoders_;
};

}  // namespace ferry
