#include "tests/support/instrumented_source.h"

#include <thread>

#include <ferry/pipeline/error.h>

namespace ferry::testing {

InstrumentedSource::InstrumentedSource(std::shared_ptr<const SyntheticSource> inner, std::optional<uint64_t> fail_at,
                                       std::chrono::microseconds max_delay)
    : inner_(std::move(inner)), max_delay_(max_delay) {
  if (fail_at) failing_.insert(*fail_at);
}

InstrumentedSource::InstrumentedSource(std::shared_ptr<const SyntheticSource> inner, std::set<uint64_t> failing,
                                       std::chrono::microseconds max_delay)
    : inner_(std::move(inner)), failing_(std::move(failing)), max_delay_(max_delay) {}

EncodedSample InstrumentedSource::read(uint64_t index) const {
  if (max_delay_.count() > 0) {
    const uint64_t hash = (index + 1) * 0x9e3779b97f4a7c15ULL;
    std::this_thread::sleep_for(std::chrono::microseconds((hash >> 33) % static_cast<uint64_t>(max_delay_.count())));
  }
  if (failing_.count(index) != 0) {
    throw Error("sample-" + std::to_string(index) + ": planted failure reading sample " + std::to_string(index));
  }
  EncodedSample sample = inner_->read(index);
  sample.key = "sample-" + std::to_string(index);
  return sample;
}

}  // namespace ferry::testing
