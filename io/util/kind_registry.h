#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/io/util/key_schema.h"
#include "ferry/io/util/remote_options.h"
#include "ferry/pipeline/error.h"

namespace ferry {

/// What a source or transform kind may need beside its own keys to make its extension (SourceKind::make_in,
/// TransformKind::make_in): the run's seed and how user code runs (decode.workers, decode.timeout,
/// decode.python).
struct MakeContext {
  uint64_t seed = 0;   // sampler.seed
  size_t workers = 1;  // worker processes for user code
  /// How long user code may take for one sample, or a worker to start; 0: no limit.
  std::chrono::milliseconds timeout{0};
  std::string python = "python3";  // the interpreter that worker processes run
  std::string python_path;         // put first on the workers' PYTHONPATH ("" : theirs as inherited)
  /// How remote, compressed and piped files are fetched and cached (the config's `remote:`).
  RemoteOptions remote;
};

}  // namespace ferry

namespace ferry::detail {

/// What SourceRegistry, DecoderRegistry and TransformRegistry have in common: extensions by name, each
/// added once and never removed, so that a looked-up one stays valid. `Kind` has `name`, `keys`, `make`
/// and `origin` members (SourceKind, DecoderKind, TransformKind). Thread-safe: lookups share a lock,
/// additions take it exclusively.
template <typename Kind>
class KindRegistry {
 public:
  /// `what` names a kind in messages ("source kind"); `reserved` is a key every kind of it takes, which
  /// none may declare ("kind"; "" for none).
  KindRegistry(std::string what, std::string reserved) : what_(std::move(what)), reserved_(std::move(reserved)) {}

  /// Why add() would refuse `kind`: no name or make, a key it cannot declare, or a name registered
  /// already (saying by whom); nullopt when it would take it. What a plugin's loader asks of each of its
  /// extensions before it adds any.
  std::optional<std::string> refusal(const Kind& kind) const {
    std::shared_lock lock(mutex_);
    return refusal_locked(kind);
  }

  /// Throws ferry::Error saying why it cannot (refusal()).
  void add(Kind kind) {
    std::unique_lock lock(mutex_);  // the name is checked and taken in one step
    if (const std::optional<std::string> why = refusal_locked(kind)) throw Error(*why);
    kinds_.push_back(std::make_shared<const Kind>(std::move(kind)));
  }

  /// The kind, or nullptr.
  std::shared_ptr<const Kind> find(std::string_view name) const {
    std::shared_lock lock(mutex_);
    return find_locked(name);
  }

  /// Names in registration order.
  std::vector<std::string> names() const {
    std::shared_lock lock(mutex_);
    std::vector<std::string> names;
    for (const auto& kind : kinds_) names.push_back(kind->name);
    return names;
  }

  std::vector<std::shared_ptr<const Kind>> kinds() const {
    std::shared_lock lock(mutex_);
    return kinds_;
  }

 private:
  std::shared_ptr<const Kind> find_locked(std::string_view name) const {
    for (const auto& kind : kinds_) {
      if (kind->name == name) return kind;
    }
    return nullptr;
  }

  std::optional<std::string> refusal_locked(const Kind& kind) const {
    if (kind.name.empty()) return "a " + what_ + " without a name";
    const std::string owner = what_ + " '" + kind.name + "'";
    bool makes = static_cast<bool>(kind.make);
    if constexpr (requires { kind.make_in; }) makes = makes || static_cast<bool>(kind.make_in);
    if (!makes) return owner + " has no make function";
    for (const KeySpec& key : kind.keys) {
      if (!reserved_.empty() && key.name == reserved_) {
        return owner + ": '" + reserved_ + "' is every " + what_ + "'s key; name the key otherwise";
      }
    }
    try {
      check_key_specs(kind.keys, owner);
    } catch (const Error& e) {
      return e.cause();
    }
    if (const std::shared_ptr<const Kind> known = find_locked(kind.name)) {
      return "a " + what_ + " named '" + kind.name + "' is already registered" +
             (known->origin.empty() ? " (built in)" : " (by " + known->origin + ")");
    }
    return std::nullopt;
  }

  const std::string what_;
  const std::string reserved_;
  mutable std::shared_mutex mutex_;
  std::vector<std::shared_ptr<const Kind>> kinds_;
};

}  // namespace ferry::detail
