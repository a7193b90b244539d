#include "tests/support/instrumented_source.h"

#include <thread>

#include "pipeline/error.h"

namespace ferry::testing {

InstrumentedSource::InstrumentedSource(std::shared_ptr<const SyntheticSource> inner, std::optional<uint64_t> fail_at,
                                       std::chrono::microseconds max_delay)
    : inner_(std::move(inner)), fail_at_(fail_at), max_delay_(max_delay) {}

EncodedSample InstrumentedSource::read(uint64_t index) const {
  if (max_delay_.count() > 0) {
    const uint64_t hash = (index + 1) * 0x9e3779b97f4a7c15ULL;
    std::this_thread::sleep_for(std::chrono::microseconds((hash >> 33) % static_cast<uint64_t>(max_delay_.count())));
  }
  if (fail_at_ && *fail_at_ == index) {
    throw Error("planted failure reading sample " + std::to_string(index));
  }
  return inner_->read(index);
}

}  // namespace ferry::testing
