#include "ferry/io/samplers/shuffled_sampler.h"

#include <array>
#include <bit>

#include "ferry/pipeline/error.h"

namespace ferry {

// Note [shuffle by Feistel permutation]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The obvious shuffle (fill a table with 0..n-1, std::shuffle it each epoch) is what we avoid:
//
//  * Resuming at position p of an epoch needs that epoch's whole table, so a restart after a crash,
//    or a rank that starts mid-epoch, must rebuild it (O(n) time and memory, every epoch).
//  * The table costs 8 bytes a sample: 8 GB for a billion-sample source, per epoch kept.
//  * std::shuffle and the std distributions are implementation-defined, so two machines (g++ 12 here,
//    g++ 13 on the GPU hosts, another libstdc++ in the Python wheel) could disagree on the order,
//    and data-parallel ranks that each compute the order would silently train on overlapping data.
//
// Instead index(epoch, position) evaluates a keyed bijection of [0, n) at `position`, the same
// way block ciphers encrypt a counter:
//
//  1. Take the smallest domain [0, 2^b) with 2^b >= n (b >= 2 so that both halves have a bit),
//     and split a b-bit value into a high half L (ceil(b/2) bits) and a low half R (floor(b/2) bits).
//  2. Run kRounds Feistel rounds that alternate: even rounds do L ^= F(k_i, R), odd rounds
//     R ^= F(k_i, L), each truncated to the half's width. A round changes one half by a function of
//     the other, which it leaves alone, so it undoes itself: every round, hence the network, is a
//     bijection of [0, 2^b) whatever F is. Alternating (rather than swapping) halves handles an odd b
//     without doubling the domain. Luby and Rackoff's 3-4 rounds assume wide halves; with halves of
//     1-3 bits (sources of a few dozen samples) 8 rounds left a chi-squared-visible bias in where a
//     position lands over many epochs (z = 22 at n = 5), 12 a faint one, 16 none, so we run 16 (8 per
//     half): about 100 ns an index, nothing next to decoding a sample.
//  3. F is the splitmix64 finalizer of (half + k_i). The round keys k_i are the splitmix64 stream
//     seeded by (seed, epoch), so each epoch is a different permutation, fixed by (seed, epoch) alone.
//  4. Cycle walking keeps the result inside [0, n): while the image is >= n, apply the permutation
//     again. Starting from a position < n this stops, because the position's own cycle returns to
//     it; distinct positions stay distinct, because each one's walk ends at the first value of its
//     cycle in [0, n) and two walks never meet. Since 2^(b-1) < n (for n > 2), more than half of the
//     domain lies in [0, n), so fewer than 2 steps are expected.
//
// Everything is fixed-width unsigned arithmetic, so every compiler and machine computes the same
// order, and n may be anything up to 2^64 - 1 (b = 64 is handled without shifting by 64).

namespace {

constexpr unsigned kRounds = 16;  // see Note [shuffle by Feistel permutation], step 2
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// The splitmix64 finalizer: a bijective 64-bit mix with full avalanche.
constexpr uint64_t mix64(uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One splitmix64 step from `state`, absorbing `word` first, so a sequence of words gives a key.
constexpr uint64_t absorb(uint64_t state, uint64_t word) noexcept { return mix64(state + kGolden + mix64(word)); }

constexpr uint64_t low_mask(unsigned bits) noexcept { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }

using RoundKeys = std::array<uint64_t, kRounds>;

// The Feistel network: a bijection of [0, 2^(left_bits + right_bits)) keyed by `keys`.
uint64_t permute(const RoundKeys& keys, unsigned left_bits, unsigned right_bits, uint64_t x) noexcept {
  const uint64_t left_mask = low_mask(left_bits);
  const uint64_t right_mask = low_mask(right_bits);
  uint64_t left = x >> right_bits;
  uint64_t right = x & right_mask;
  for (unsigned round = 0; round < kRounds; ++round) {
    if (round % 2 == 0) {
      left ^= mix64(right + keys[round]) & left_mask;
    } else {
      right ^= mix64(left + keys[round]) & right_mask;
    }
  }
  return (left << right_bits) | right;
}

}  // namespace

ShuffledSampler::ShuffledSampler(uint64_t size, uint64_t seed) : size_(size), seed_(seed) {
  // Smallest b with 2^b >= size (bit_width(size - 1)), at least 2 so that both halves have a bit.
  const unsigned bits = size <= 4 ? 2u : static_cast<unsigned>(std::bit_width(size - 1));
  right_bits_ = bits / 2;
  left_bits_ = bits - right_bits_;
}

uint64_t ShuffledSampler::index(uint64_t epoch, uint64_t position) const {
  if (position >= size_) {
    throw Error("shuffled sampler: position " + std::to_string(position) + " of epoch " + std::to_string(epoch) +
                " is outside the epoch of " + std::to_string(size_) + " samples");
  }
  // The splitmix64 stream from a state that depends on (seed, epoch) alone.
  RoundKeys keys;
  const uint64_t state = absorb(absorb(0, seed_), epoch);
  for (unsigned round = 0; round < kRounds; ++round) keys[round] = mix64(state + (round + 1) * kGolden);
  uint64_t x = position;
  do {
    x = permute(keys, left_bits_, right_bits_, x);
  } while (x >= size_);
  return x;
}

std::string ShuffledSampler::describe() const {
  return "shuffled(size=" + std::to_string(size_) + ", seed=" + std::to_string(seed_) + ")";
}

}  // namespace ferry
