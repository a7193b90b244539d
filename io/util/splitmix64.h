#pragma once

#include <cstdint>

namespace ferry {

/// splitmix64's increment, the golden ratio in 64-bit fixed point.
inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

/// splitmix64's finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mix with full avalanche.
constexpr uint64_t mix64(uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// One step of the splitmix64 generator: advances `state` and returns 64 random bits. Integer
/// arithmetic only, so the stream of a seed is the same on every machine and compiler: ferry's
/// generated data, shuffles and random crops must not depend on where they run.
constexpr uint64_t splitmix64(uint64_t& state) noexcept { return mix64(state += kGoldenGamma); }

}  // namespace ferry
