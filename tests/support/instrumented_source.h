#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <set>

#include <ferry/io/formats/synthetic_source.h>

namespace ferry::testing {

/// A synthetic source with faults planted for tests: reading `fail_at` (or any of `failing`) throws,
/// and every read first sleeps a pseudo-random time below `max_delay` (so parallel decodes finish
/// out of order). Sample keys are "sample-<index>".
class InstrumentedSource : public Source {
 public:
  InstrumentedSource(std::shared_ptr<const SyntheticSource> inner, std::optional<uint64_t> fail_at = std::nullopt,
                     std::chrono::microseconds max_delay = std::chrono::microseconds(0));
  InstrumentedSource(std::shared_ptr<const SyntheticSource> inner, std::set<uint64_t> failing,
                     std::chrono::microseconds max_delay = std::chrono::microseconds(0));
  const std::vector<FieldSpec>& fields() const override { return inner_->fields(); }
  uint64_t size() const override { return inner_->size(); }
  EncodedSample read(uint64_t index) const override;
  std::string describe() const override { return "instrumented " + inner_->describe(); }

 private:
  std::shared_ptr<const SyntheticSource> inner_;
  std::set<uint64_t> failing_;
  std::chrono::microseconds max_delay_;
};

}  // namespace ferry::testing
