#include "ferry/io/util/units.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace ferry {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

// Splits "1.5GB" into 1.5 and "GB". The number must be non-negative; past a double's range it is +inf.
std::optional<std::pair<double, std::string_view>> number_and_unit(std::string_view text) {
  text = trim(text);
  // "1e3ms" and "2.5e-1s" too: YAML writes large and small numbers so.
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text.front())) || text.front() == '.')) return std::nullopt;
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if ((error != std::errc() && error != std::errc::result_out_of_range) || end == text.data()) return std::nullopt;
  if (error == std::errc::result_out_of_range) value = HUGE_VAL;  // "1e400": past any limit, said so
  if (value < 0) return std::nullopt;
  return std::pair{value, trim(text.substr(static_cast<size_t>(end - text.data())))};
}

}  // namespace

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

namespace {

// parse_byte_size(), and in `why` what is wrong when it returns nullopt.
std::optional<uint64_t> read_byte_size(std::string_view text, std::string& why) {
  // Exact decimal arithmetic, not doubles: "1.001KB" is 1001 bytes, and binary floating point would
  // make it 1000.9999... and reject it as a fraction of a byte.
  text = trim(text);
  size_t end = 0;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  const std::string_view whole = text.substr(0, end);
  std::string_view fraction;
  if (end < text.size() && text[end] == '.') {
    const size_t start = ++end;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    fraction = text.substr(start, end - start);
  }
  if (whole.empty() && fraction.empty()) {
    why = "not a number of bytes with a unit";
    return std::nullopt;
  }
  if (whole.size() > 19 || fraction.size() > 18) {
    why = whole.size() > 19 ? "8 EiB or more, past the largest size (2^63 - 1 bytes)" : "too many decimals";
    return std::nullopt;
  }
  const std::string_view unit = trim(text.substr(end));
  struct Unit {
    std::string_view name;
    uint64_t bytes;
  };
  static constexpr uint64_t kKi = 1024;
  static constexpr std::array<Unit, 16> kUnits{{
      {"", 1},
      {"b", 1},
      {"byte", 1},
      {"bytes", 1},
      {"kb", 1000},
      {"mb", 1000000},
      {"gb", 1000000000},
      {"tb", 1000000000000},
      {"kib", kKi},
      {"mib", kKi * kKi},
      {"gib", kKi * kKi * kKi},
      {"tib", kKi * kKi * kKi * kKi},
      {"k", kKi},
      {"m", kKi * kKi},
      {"g", kKi * kKi * kKi},
      {"t", kKi * kKi * kKi * kKi},
  }};
  const auto found = std::find_if(kUnits.begin(), kUnits.end(),
                                  [&](const Unit& candidate) { return equal_ignoring_case(unit, candidate.name); });
  if (found == kUnits.end()) {
    why = "unknown unit '" + std::string(unit) + "' (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, or k, m, g, t)";
    return std::nullopt;
  }
  __extension__ typedef unsigned __int128 Wide;  // __extension__: GCC and Clang have it; -Wpedantic knows
  Wide whole_value = 0;
  for (const char c : whole) whole_value = whole_value * 10 + static_cast<unsigned>(c - '0');
  Wide fraction_value = 0;
  Wide scale = 1;
  for (const char c : fraction) {
    fraction_value = fraction_value * 10 + static_cast<unsigned>(c - '0');
    scale *= 10;
  }
  const Wide fraction_bytes = fraction_value * found->bytes;
  if (fraction_bytes % scale != 0) {
    why = "a fraction of a byte";
    return std::nullopt;
  }
  const Wide bytes = whole_value * found->bytes + fraction_bytes / scale;
  if (bytes >= (Wide{1} << 63)) {
    why = "8 EiB or more, past the largest size (2^63 - 1 bytes)";
    return std::nullopt;
  }
  return static_cast<uint64_t>(bytes);
}

// parse_duration(), and in `why` what is wrong when it returns nullopt.
std::optional<std::chrono::milliseconds> read_duration(std::string_view text, std::string& why) {

  const auto parsed = number_and_unit(text);
  if (!parsed) {
    why = "not a number with a unit";
    return std::nullopt;
  }
  const auto [value, unit] = *parsed;
  double milliseconds = 0;
  if (unit.empty() || unit == "s") {
    milliseconds = value * 1e3;
  } else if (unit == "ms") {
    milliseconds = value;
  } else if (unit == "m" || unit == "min") {
    milliseconds = value * 60e3;
  } else {
    why = "unknown unit '" + std::string(unit) + "' (ms, s, m or min)";
    return std::nullopt;
  }
  if (milliseconds > 1e12) {
    why = "longer than the longest duration, 1e12 ms (about 31 years)";
    return std::nullopt;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(milliseconds)));
}

}  // namespace

std::optional<uint64_t> parse_byte_size(std::string_view text) {
  std::string why;
  return read_byte_size(text, why);
}

std::string byte_size_problem(std::string_view text) {
  std::string why;
  read_byte_size(text, why);
  return why;
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  std::string why;
  return read_duration(text, why);
}

std::string duration_problem(std::string_view text) {
  std::string why;
  read_duration(text, why);
  return why;
}


std::string format_byte_size(uint64_t bytes) {
  static constexpr std::array<const char*, 5> kNames{"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < kNames.size()) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0 || value == std::floor(value)) {
    std::snprintf(text, sizeof text, "%.0f %s", value, kNames[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.2f %s", value, kNames[unit]);
  }
  return text;
}

std::string format_decimal_bytes(double bytes) {
  static constexpr std::array<const char*, 5> kNames{"B", "KB", "MB", "GB", "TB"};
  if (!(bytes > 0)) bytes = 0;  // NaN too
  size_t unit = 0;
  while (bytes >= 1000 && unit + 1 < kNames.size()) {
    bytes /= 1000;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", bytes, kNames[unit]);
  return text;
}

}  // namespace ferry
