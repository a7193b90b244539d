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

/// The random numbers of one sample's choice (a crop, a flip): a splitmix64 stream keyed by (seed,
/// epoch, sample index, which choice), so that every choice is the same on every run, after a resume
/// and whichever thread or device makes it, and the choices of a sample are independent of each other.
class SampleStream {
 public:
  constexpr SampleStream(uint64_t seed, uint64_t epoch, uint64_t sample, uint64_t which) noexcept
      : state_(mix64(seed ^ mix64(epoch + kGoldenGamma * mix64(sample + kGoldenGamma * which)))) {}
  /// Uniform in [0, 1) with 53 random bits.
  double unit() noexcept { return static_cast<double>(splitmix64(state_) >> 11) * 0x1.0p-53; }
  double uniform(double low, double high) noexcept { return low + (high - low) * unit(); }
  /// Uniform in 0..n.
  int64_t up_to(int64_t n) noexcept {
    const auto drawn = static_cast<int64_t>(unit() * static_cast<double>(n + 1));
    return drawn < n ? drawn : n;
  }

 private:
  uint64_t state_;
};

}  // namespace ferry
