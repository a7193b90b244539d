#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ferry {

/// Reads a byte count: "4096", "64MiB", "1.5GB", "512 KiB", "2g". Decimal units (kB/KB, MB, GB, TB)
/// are powers of 1000, binary ones (KiB, MiB, GiB, TiB) powers of 1024; a lone letter (k, m, g, t)
/// is binary, as in most tools' flags. nullopt for anything else, for a fraction of a byte and for
/// values past 2^63. Thread-safe, allocates nothing.
std::optional<uint64_t> parse_byte_size(std::string_view text);

/// Why parse_byte_size() refuses `text`, for messages: "a fraction of a byte", "unknown unit 'x' (...)",
/// "8 EiB or more, past the largest size (2^63 - 1 bytes)"; "" when it reads it.
std::string byte_size_problem(std::string_view text);

/// Reads a duration: "5s", "500ms", "2m", "0.5s", "1e3ms", or a plain number of seconds; at most 1e12 ms.
/// nullopt otherwise.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

/// Why parse_duration() refuses `text`, for messages: "unknown unit 'h' (ms, s, m or min)", "longer than
/// the longest duration, ..."; "" when it reads it.
std::string duration_problem(std::string_view text);

/// Whether `a` and `b` are the same ASCII text but for letter case ("PNG" and "png").
bool equal_ignoring_case(std::string_view a, std::string_view b);

/// "64 MiB", "1.50 GiB", "4096 B": binary units, for messages about slabs and budgets.
std::string format_byte_size(uint64_t bytes);

/// "38.50 MB", "131 B": decimal units with two decimals past bytes, for amounts moved and rates
/// (reports, benchmarks), where GB/s means 10^9 bytes a second. Negative values read as 0.
std::string format_decimal_bytes(double bytes);

}  // namespace ferry
