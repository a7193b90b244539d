#include "io/units.h"

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

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

// Splits "1.5GB" into 1.5 and "GB". The number must be non-negative and finite.
std::optional<std::pair<double, std::string_view>> number_and_unit(std::string_view text) {
  text = trim(text);
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) ++digits;
  if (digits == 0) return std::nullopt;
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + digits, value);
  if (error != std::errc() || end != text.data() + digits || !std::isfinite(value) || value < 0) return std::nullopt;
  return std::pair{value, trim(text.substr(digits))};
}

}  // namespace

std::optional<uint64_t> parse_byte_size(std::string_view text) {
  const auto parsed = number_and_unit(text);
  if (!parsed) return std::nullopt;
  const auto [value, unit] = *parsed;
  struct Unit {
    std::string_view name;
    double bytes;
  };
  static constexpr std::array<Unit, 16> kUnits{{
      {"", 1},          {"b", 1},          {"byte", 1},       {"bytes", 1},
      {"kb", 1e3},      {"mb", 1e6},       {"gb", 1e9},       {"tb", 1e12},
      {"kib", 1 << 10}, {"mib", 1 << 20},  {"gib", 1 << 30},  {"tib", 1099511627776.0},
      {"k", 1 << 10},   {"m", 1 << 20},    {"g", 1 << 30},    {"t", 1099511627776.0},
  }};
  for (const Unit& candidate : kUnits) {
    if (!equal_ignoring_case(unit, candidate.name)) continue;
    const double bytes = value * candidate.bytes;
    if (bytes != std::floor(bytes) || bytes >= 9.2e18) return std::nullopt;
    return static_cast<uint64_t>(bytes);
  }
  return std::nullopt;
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  const auto parsed = number_and_unit(text);
  if (!parsed) return std::nullopt;
  const auto [value, unit] = *parsed;
  double milliseconds = 0;
  if (unit.empty() || unit == "s") {
    milliseconds = value * 1e3;
  } else if (unit == "ms") {
    milliseconds = value;
  } else if (unit == "m" || unit == "min") {
    milliseconds = value * 60e3;
  } else {
    return std::nullopt;
  }
  if (milliseconds > 1e12) return std::nullopt;
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(milliseconds)));
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

}  // namespace ferry
