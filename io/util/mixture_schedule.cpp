#include "ferry/io/util/mixture_schedule.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <optional>

#include "ferry/pipeline/error.h"

namespace ferry {

// Note [smooth mixture schedule]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Drawing each position's source at random leaves a source's count about sqrt(n) away from share * n
// after n positions, and a short run of batches may miss a small source entirely. kSmooth interleaves
// deterministically instead, and keeps the order periodic so that any position is found without an
// index over the epoch.
//
//  1. Parts. Each weight is read as the shortest decimal that prints it (std::to_chars: 0.7 is "0.7",
//     i.e. 7/10, not the binary fraction nearest to it); all are scaled to a common power of ten and
//     divided by their gcd, giving integers a_k with period D = sum a_k (0.7/0.3 -> 7, 3 and D = 10;
//     2/1 -> 2, 1 and D = 3). When D would pass 2^24 (or the scaling overflows), the parts are instead
//     the largest-remainder apportionment of 2^24 in proportion to the weights, every positive weight
//     getting at least 1; the shares are then off by at most about 2^-24.
//  2. The rule. Before position n (0-based), c_k(n) is the number of earlier positions that took k.
//     Position n takes the k with the largest deficit d_k(n) = a_k (n + 1) - D c_k(n), the lowest k
//     among equals. (Every position credits each source a_k, and the one picked pays D: the smooth
//     weighted round-robin of load balancers.)
//  3. Why it is periodic. Let e_k(n) = a_k n - D c_k(n), so d_k = e_k + a_k and sum_k e_k(n) = 0. Then
//     sum_k d_k = D > 0, so the picked source has d >= 1 (integers; the largest is at least the mean)
//     and leaves with e = d - D > -D, while every other e_k grows by a_k >= 0. From e(0) = 0, every
//     e_k stays > -D. At n = D each e_k(D) = D (a_k - c_k(D)) is a multiple of D and > -D, so >= 0;
//     they sum to 0, so all are 0: c_k(D) = a_k and the state is back where it began. Hence the order
//     repeats every D positions and counts(p) = (p / D) a_k + c_k(p mod D).
//  4. What it guarantees. e_k > -D says no source is ever a whole sample ahead of its share:
//     c_k(n) < share_k n + 1. A source of part 0 keeps d = 0 while the largest d is >= 1, so it is
//     never picked. How far a source can fall behind depends on the weights (sum e = 0 bounds it only
//     by K - 1 with K sources); measured over many weight sets, below 1.5 cumulatively, and windows
//     of ceil(1 / smallest share) positions hold within 2 of share * window (the tests pin both).
//  5. Random access. The cursor serves the usual in-order walk with one pass over the sources. For
//     any other position we replay from the nearest checkpoint: the counts at offsets 0, B, 2B, ... of
//     one period, recorded the first time the walk passes them. B = 1024, doubled while one period's
//     checkpoints would exceed kMaxCheckpointWords, so the cache stays within 16 MiB whatever D and K are.

// Note [Megatron blending order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// kMegatron reproduces, position for position, the dataset_index and dataset_sample_index of
// Megatron-LM's BlendedDataset (megatron/core/datasets/blended_dataset.py), which its
// build_blending_indices (megatron/core/datasets/helpers.cpp) fills:
//
//    for each sample_idx:  x = max(double(sample_idx), 1.0)        // positions 0 and 1 both use x = 1
//                          k = the first argmax of w_k * x - double(count_k)   (strict >)
//                          dataset_index = k; dataset_sample_index = count_k; ++count_k
//
// All in doubles, so which source wins a near tie depends on the last bit of each w_k and on each
// product being rounded before the subtraction. Hence:
//
//  * The loop below is compiled without floating-point contraction: a fused multiply-subtract (which
//    compilers emit by default where the hardware has FMA) rounds once and moves ties (0.6, 0.3, 0.1
//    would differ from position 9). Megatron builds helpers.cpp with -O3 and no -march, so on x86-64
//    its loop has no FMA either; on aarch64, where GCC contracts by default, Megatron's own order
//    differs from the one reproduced here.
//  * w is exactly what Megatron feeds in. BlendedMegatronDatasetBuilder normalizes the blend's
//    weights with normalize() (megatron/core/datasets/utils.py: a float64 numpy array divided by
//    numpy.sum of it), and BlendedDataset normalizes the result once more; two roundings are not one
//    (0.6, 0.3, 0.1 picks differently at positions 2, 3, 12, 13, ... after one normalization than
//    after two), so we apply both. numpy.sum of a float64 vector is pairwise: numpy's
//    DOUBLE_pairwise_sum over each buffer of 8192 elements (its default buffer size), the buffers'
//    sums added in turn to 0. numpy_sum() below does the same, bit for bit (checked against numpy
//    1.24 for thousands of weight lists of 1 to 50000 weights).
//  * Megatron asserts that every weight is > 0. A source of weight 0 is left out of the loop and of
//    the normalization here, which is what Megatron computes for the blend without that dataset.
//
// The order has no period, so checkpoints are kept from position 0 on, every B positions: B starts at
// 1024, and whenever more than max_checkpoints_ exist every other one is dropped and B doubles.

namespace {

constexpr uint64_t kMaxPeriod = uint64_t{1} << 24;           // Note [smooth mixture schedule], step 1
constexpr uint64_t kFirstStride = 1024;                      // positions between checkpoints, at first
constexpr uint64_t kMaxCheckpointWords = uint64_t{1} << 21;  // 16 MiB of counts
constexpr uint64_t kMaxMegatronCheckpoints = uint64_t{1} << 16;
constexpr size_t kNumpyBufferSize = 8192;  // numpy's default ufunc buffer, in elements

std::string shortest(double value) {
  char text[64];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

void check_weights(const std::vector<double>& weights) {
  if (weights.empty()) throw Error("mixture weights: the list is empty; at least one weight must be > 0");
  bool any_positive = false;
  for (size_t k = 0; k < weights.size(); ++k) {
    const double w = weights[k];
    if (!std::isfinite(w)) {
      throw Error("mixture weight " + std::to_string(k) + " is " + shortest(w) + ": weights must be finite");
    }
    if (w < 0) {
      throw Error("mixture weight " + std::to_string(k) + " is " + shortest(w) + ": weights must be >= 0");
    }
    any_positive = any_positive || w > 0;
  }
  if (!any_positive) {
    throw Error("mixture weights are all 0 (" + std::to_string(weights.size()) +
                " of them): at least one weight must be > 0");
  }
}

// ---- kSmooth: integer parts (Note [smooth mixture schedule], step 1) ----

// A positive finite double's shortest decimal as digits * 10^exponent, digits without trailing zeros
// (at most 17 of them, so they fit).
struct Decimal {
  uint64_t digits = 0;
  int exponent = 0;
};

Decimal decimal_of(double value) {
  const std::string text = shortest(value);  // e.g. "0.7", "2", "1e-05", "1.5e+20", "123456789012345680000"
  std::string digits;
  int exponent = 0;
  bool after_point = false;
  size_t i = 0;
  for (; i < text.size() && text[i] != 'e'; ++i) {
    if (text[i] == '.') {
      after_point = true;
    } else {
      digits += text[i];
      if (after_point) --exponent;
    }
  }
  if (i < text.size()) exponent += std::stoi(text.substr(i + 1));
  const size_t first = digits.find_first_not_of('0');  // value > 0, so there is one
  digits.erase(0, first);
  while (digits.back() == '0') {
    digits.pop_back();
    ++exponent;
  }
  Decimal result;
  result.exponent = exponent;
  for (const char c : digits) result.digits = result.digits * 10 + static_cast<uint64_t>(c - '0');
  return result;
}

__extension__ typedef unsigned __int128 u128;  // __extension__: GCC and Clang have it; -Wpedantic knows

u128 gcd128(u128 a, u128 b) {
  while (b != 0) {
    const u128 r = a % b;
    a = b;
    b = r;
  }
  return a;
}

// The exact parts of the positive weights, or nothing when their common denominator exceeds kMaxPeriod.
std::optional<std::vector<uint64_t>> exact_parts(const std::vector<double>& positive) {
  std::vector<Decimal> decimals;
  for (const double w : positive) decimals.push_back(decimal_of(w));
  int lowest = decimals.front().exponent;
  for (const Decimal& d : decimals) lowest = std::min(lowest, d.exponent);
  // Scaled parts stay below 2^126, so that nothing overflows; a part that would not is at least
  // 2^126 / 10^17 times the part of a weight with the lowest exponent, so its period is too long anyway.
  constexpr u128 kLimit = u128{1} << 126;
  std::vector<u128> scaled;
  u128 common = 0;
  for (const Decimal& d : decimals) {
    u128 part = d.digits;
    for (int e = lowest; e < d.exponent; ++e) {
      if (part > kLimit / 10) return std::nullopt;
      part *= 10;
    }
    scaled.push_back(part);
    common = gcd128(common, part);
  }
  std::vector<uint64_t> parts;
  uint64_t period = 0;
  for (const u128 part : scaled) {
    const u128 reduced = part / common;
    if (reduced > kMaxPeriod - period) return std::nullopt;
    parts.push_back(static_cast<uint64_t>(reduced));
    period += parts.back();
  }
  return parts;
}

// Largest-remainder apportionment of kMaxPeriod in proportion to the positive weights, each part >= 1.
std::vector<uint64_t> quantized_parts(const std::vector<double>& positive) {
  const size_t n = positive.size();
  if (n >= kMaxPeriod) return std::vector<uint64_t>(n, 1);
  // Divide by the largest weight first, so that the sum cannot overflow.
  const double largest = *std::max_element(positive.begin(), positive.end());
  std::vector<double> quota(n);
  double sum = 0;
  for (size_t k = 0; k < n; ++k) sum += positive[k] / largest;
  for (size_t k = 0; k < n; ++k) quota[k] = positive[k] / largest / sum * static_cast<double>(kMaxPeriod);
  std::vector<uint64_t> parts(n);
  int64_t left = static_cast<int64_t>(kMaxPeriod);
  for (size_t k = 0; k < n; ++k) {
    parts[k] = std::max<uint64_t>(1, static_cast<uint64_t>(std::floor(quota[k])));
    left -= static_cast<int64_t>(parts[k]);
  }
  // What each part still lacks of its quota; the largest lacks get the units left (lowest k first).
  auto lack = [&](size_t k) { return quota[k] - static_cast<double>(parts[k]); };
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return lack(x) > lack(y); });
  for (size_t i = 0; left > 0; ++i, --left) ++parts[order[i % n]];
  // Parts raised to 1 may overdraw: take back from the parts most above their quotas.
  while (left < 0) {
    size_t most = n;
    for (size_t k = 0; k < n; ++k) {
      if (parts[k] > 1 && (most == n || lack(k) < lack(most))) most = k;
    }
    --parts[most];
    ++left;
  }
  uint64_t common = 0;
  for (const uint64_t part : parts) common = std::gcd(common, part);
  for (uint64_t& part : parts) part /= common;
  return parts;
}

// ---- kMegatron: the weights as Megatron compares them (Note [Megatron blending order]) ----

// numpy's DOUBLE_pairwise_sum.
double pairwise_sum(const double* a, size_t n) {
  if (n < 8) {
    double sum = 0.;
    for (size_t i = 0; i < n; ++i) sum += a[i];
    return sum;
  }
  if (n <= 128) {
    double r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - n % 8; i += 8) {
      for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) sum += a[i];
    return sum;
  }
  size_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

// numpy.sum of a contiguous float64 vector: the reduction starts from 0 and adds each buffer's pairwise sum.
double numpy_sum(const std::vector<double>& values) {
  double sum = 0.;
  for (size_t start = 0; start < values.size(); start += kNumpyBufferSize) {
    sum += pairwise_sum(values.data() + start, std::min(kNumpyBufferSize, values.size() - start));
  }
  return sum;
}

// Megatron's normalize(): numpy.array(weights, dtype=float64) / numpy.sum(it).
std::vector<double> normalize(std::vector<double> values) {
  const double sum = numpy_sum(values);
  for (double& v : values) v /= sum;
  return values;
}

// The first k maximizing rates[k] * x - counts[k], each product rounded before the subtraction and each
// count converted as Megatron's int64_t, as in its loop (hence no contraction into a fused multiply-subtract).
#if defined(__clang__)
size_t megatron_argmax(const double* rates, const uint64_t* counts, size_t n, double x) {
#pragma clang fp contract(off)
#elif defined(__GNUC__)
__attribute__((optimize("fp-contract=off"))) size_t megatron_argmax(const double* rates, const uint64_t* counts,
                                                                    size_t n, double x) {
#else
size_t megatron_argmax(const double* rates, const uint64_t* counts, size_t n, double x) {
#endif
  size_t best = 0;
  double best_error = rates[0] * x - static_cast<double>(static_cast<int64_t>(counts[0]));
  for (size_t k = 1; k < n; ++k) {
    const double error = rates[k] * x - static_cast<double>(static_cast<int64_t>(counts[k]));
    if (error > best_error) {
      best_error = error;
      best = k;
    }
  }
  return best;
}

}  // namespace

MixtureSchedule::MixtureSchedule(std::vector<double> weights, Mode mode) : mode_(mode), weights_(std::move(weights)) {
  check_weights(weights_);
  std::vector<double> positive;
  for (size_t k = 0; k < weights_.size(); ++k) {
    if (weights_[k] > 0) {
      active_.push_back(k);
      positive.push_back(weights_[k]);
    }
  }
  const size_t n = active_.size();
  shares_.assign(weights_.size(), 0.0);
  stride_ = kFirstStride;
  if (mode_ == Mode::kSmooth) {
    std::optional<std::vector<uint64_t>> exact = exact_parts(positive);
    parts_ = exact ? std::move(*exact) : quantized_parts(positive);
    period_ = std::accumulate(parts_.begin(), parts_.end(), uint64_t{0});
    for (size_t i = 0; i < n; ++i) {
      shares_[active_[i]] = static_cast<double>(parts_[i]) / static_cast<double>(period_);
    }
    // One period's checkpoints, counts at offsets 0, B, ..., must fit kMaxCheckpointWords.
    while (stride_ < period_ && (period_ / stride_ + 1) * n > kMaxCheckpointWords) stride_ *= 2;
    max_checkpoints_ = period_ / stride_ + 1;
    cursor_.excess.assign(n, 0);
  } else {
    rates_ = normalize(normalize(positive));
    for (size_t i = 0; i < n; ++i) shares_[active_[i]] = rates_[i];
    max_checkpoints_ = std::clamp<uint64_t>(kMaxCheckpointWords / n, 2, kMaxMegatronCheckpoints);
  }
  cursor_.counts.assign(n, 0);
  record_checkpoint();  // the counts before offset 0: all zero
}

void MixtureSchedule::record_checkpoint() const {
  checkpoints_.insert(checkpoints_.end(), cursor_.counts.begin(), cursor_.counts.end());
  ++checkpoint_count_;
  if (checkpoint_count_ <= max_checkpoints_) return;
  // kMegatron only (one period's checkpoints always fit): keep every other one, at twice the stride.
  const size_t n = active_.size();
  uint64_t kept = 0;
  for (uint64_t i = 0; i < checkpoint_count_; i += 2, ++kept) {
    std::copy_n(checkpoints_.begin() + static_cast<ptrdiff_t>(i * n), n,
                checkpoints_.begin() + static_cast<ptrdiff_t>(kept * n));
  }
  checkpoint_count_ = kept;
  checkpoints_.resize(kept * n);
  stride_ *= 2;
}

void MixtureSchedule::load_checkpoint(uint64_t index) const {
  const size_t n = active_.size();
  cursor_.offset = index * stride_;
  std::copy_n(checkpoints_.begin() + static_cast<ptrdiff_t>(index * n), n, cursor_.counts.begin());
  if (mode_ == Mode::kSmooth) {
    // e_k = a_k offset - D c_k; below 2^48 in size, since offset, c_k <= D <= 2^24.
    for (size_t i = 0; i < n; ++i) {
      cursor_.excess[i] =
          static_cast<int64_t>(parts_[i] * cursor_.offset) - static_cast<int64_t>(period_ * cursor_.counts[i]);
    }
  }
}

size_t MixtureSchedule::step() const {
  const size_t n = active_.size();
  size_t best = 0;
  if (mode_ == Mode::kSmooth) {
    // Adding a_k to every e_k first makes it the deficit d_k; the picked one then pays D.
    int64_t* excess = cursor_.excess.data();
    int64_t best_deficit = excess[0] += static_cast<int64_t>(parts_[0]);
    for (size_t i = 1; i < n; ++i) {
      excess[i] += static_cast<int64_t>(parts_[i]);
      if (excess[i] > best_deficit) {
        best_deficit = excess[i];
        best = i;
      }
    }
    excess[best] -= static_cast<int64_t>(period_);
  } else {
    const double x = std::max(static_cast<double>(cursor_.offset), 1.0);
    best = megatron_argmax(rates_.data(), cursor_.counts.data(), n, x);
  }
  ++cursor_.counts[best];
  ++cursor_.offset;
  // Record the counts before each multiple of the stride the first time the walk gets there (kSmooth:
  // within the period only).
  if (cursor_.offset == checkpoint_count_ * stride_ && (mode_ == Mode::kMegatron || cursor_.offset < period_)) {
    record_checkpoint();
  }
  return best;
}

void MixtureSchedule::seek(uint64_t offset) const {
  if (cursor_.offset == offset) return;
  // The nearest checkpoint at or before `offset`, if the cursor is not nearer.
  const uint64_t index = std::min(offset / stride_, checkpoint_count_ - 1);
  if (cursor_.offset > offset || cursor_.offset < index * stride_) load_checkpoint(index);
  while (cursor_.offset < offset) step();
}

MixtureSchedule::Pick MixtureSchedule::at(uint64_t position) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (mode_ == Mode::kSmooth) {
    const uint64_t periods = position / period_;
    seek(position % period_);
    const size_t picked = step();
    // The count before the position is (p / D) a_k + c_k(p mod D), and the step has added 1 to c_k.
    return Pick{active_[picked], periods * parts_[picked] + cursor_.counts[picked] - 1};
  }
  seek(position);
  const size_t picked = step();
  return Pick{active_[picked], cursor_.counts[picked] - 1};
}

std::vector<uint64_t> MixtureSchedule::counts(uint64_t position) const {
  std::vector<uint64_t> result(weights_.size(), 0);
  std::lock_guard<std::mutex> lock(mutex_);
  const bool smooth = mode_ == Mode::kSmooth;
  const uint64_t periods = smooth ? position / period_ : 0;
  seek(smooth ? position % period_ : position);
  for (size_t i = 0; i < active_.size(); ++i) {
    result[active_[i]] = (smooth ? periods * parts_[i] : 0) + cursor_.counts[i];
  }
  return result;
}

std::string MixtureSchedule::describe() const {
  std::string text = mode_ == Mode::kSmooth ? "smooth(" : "megatron(";
  for (size_t k = 0; k < weights_.size(); ++k) text += (k == 0 ? "" : ", ") + shortest(weights_[k]);
  return text + ")";
}

}  // namespace ferry
