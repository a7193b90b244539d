#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <ferry/io/samplers/sampler.h>

namespace ferry::testing {

/// The whole order `sampler` gives for `epoch`: index(epoch, p) for every position p.
inline std::vector<uint64_t> epoch_order(const Sampler& sampler, uint64_t epoch) {
  std::vector<uint64_t> order(sampler.epoch_size());
  for (uint64_t p = 0; p < order.size(); ++p) order[p] = sampler.index(epoch, p);
  return order;
}

/// Whether `order` holds each of 0 .. size-1 exactly once.
inline bool is_permutation_of_range(std::vector<uint64_t> order) {
  std::sort(order.begin(), order.end());
  for (uint64_t i = 0; i < order.size(); ++i) {
    if (order[i] != i) return false;
  }
  return true;
}

}  // namespace ferry::testing
