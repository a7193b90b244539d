#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ferry/io/decoders/sentencepiece_module.h"

namespace ferry {

/// A sentencepiece model (a `.model` file, as spm_train writes it), loaded once and shared by the
/// decode threads. sentencepiece itself lives in a module that ferry loads on first use (Note
/// [sentencepiece module]). Internal: not installed.
class SentencePieceModel {
 public:
  /// Why no model can be loaded in this process (ferry built without sentencepiece, the module not
  /// found, a sanitizer build beside a global protobuf), or nullopt.
  static std::optional<std::string> unavailable();

  /// Loads the model at `path`. Throws ferry::Error naming the path: no such file, not a model, or
  /// unavailable().
  static std::shared_ptr<const SentencePieceModel> load(const std::string& path);

  ~SentencePieceModel();
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  const std::string& path() const noexcept { return path_; }
  /// Its vocabulary size and special ids (-1 where it has none).
  const FerrySentencePieceIds& ids() const noexcept { return ids_; }
  /// The ids of UTF-8 `text`: writes the first `capacity` of them to `out` and returns how many the
  /// whole text has, or, where only the text's start was encoded, a number above `capacity` that may be
  /// short of it (Note [encoding only what is kept]). Thread-safe. Throws ferry::Error for what
  /// sentencepiece refuses.
  int64_t encode(std::string_view text, int32_t* out, int64_t capacity) const;

 private:
  SentencePieceModel(std::string path, void* handle, FerrySentencePieceIds ids)
      : path_(std::move(path)), handle_(handle), ids_(ids) {}

  std::string path_;
  void* handle_;
  FerrySentencePieceIds ids_;
};

}  // namespace ferry
