#include "ferry/io/samplers/sequential_sampler.h"

#include "ferry/pipeline/error.h"

namespace ferry {

uint64_t SequentialSampler::index(uint64_t epoch, uint64_t position) const {
  if (position >= size_) {
    throw Error("sequential sampler: position " + std::to_string(position) + " of epoch " + std::to_string(epoch) +
                " is outside the epoch of " + std::to_string(size_) + " samples");
  }
  return position;
}

std::string SequentialSampler::describe() const { return "sequential(" + std::to_string(size_) + ")"; }

}  // namespace ferry
