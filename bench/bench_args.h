#pragma once

// What the C++ benchmarks share: their command-line options, and the name of a case's trace file. Each
// benchmark names its options once, with where each value goes; parse() reads argv and, for an unknown
// option, a missing value or a value that is not a number, prints the problem and the usage and exits
// with status 2 (no exception escapes to terminate the program).

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace bench {

class BenchArgs {
 public:
  /// `program`: the name errors start with; `usage`: the line printed after an error.
  BenchArgs(std::string program, std::string usage) : program_(std::move(program)), usage_(std::move(usage)) {}

  /// `--name VALUE` into `out`.
  BenchArgs& value(const std::string& name, std::string& out) {
    return add(name, true, [&out](const std::string& text) { out = text; });
  }
  BenchArgs& value(const std::string& name, size_t& out) {
    return add(name, true, [&out](const std::string& text) { out = to_number<size_t>(text); });
  }
  /// A finite number >= 0 (no benchmark takes a negative one; inf would run for ever).
  BenchArgs& value(const std::string& name, double& out) {
    return add(name, true, [&out](const std::string& text) { out = to_number<double>(text); });
  }
  /// `--name` alone sets `out`.
  BenchArgs& flag(const std::string& name, bool& out) {
    return add(name, false, [&out](const std::string&) { out = true; });
  }
  /// A word that is not an option, at most once.
  BenchArgs& positional(std::string& out) {
    positional_ = &out;
    return *this;
  }

  void parse(int argc, char** argv) const {
    bool positional_seen = false;
    for (int i = 1; i < argc; ++i) {
      const std::string word = argv[i];
      if (positional_ != nullptr && !positional_seen && !word.empty() && word[0] != '-') {
        *positional_ = word;
        positional_seen = true;
        continue;
      }
      const Option* option = find(word);
      if (option == nullptr) fail("unknown option " + word);
      if (option->takes_value && i + 1 >= argc) fail(word + " needs a value");
      try {
        option->set(option->takes_value ? std::string(argv[++i]) : std::string());
      } catch (const std::invalid_argument& wanted) {
        fail(word + " takes " + wanted.what() + ", not '" + argv[i] + "'");
      }
    }
  }

  /// Prints "<program>: <problem>" and the usage; exits with status 2.
  [[noreturn]] void fail(const std::string& problem) const {
    std::fprintf(stderr, "%s: %s\nusage: %s\n", program_.c_str(), problem.c_str(), usage_.c_str());
    std::exit(2);
  }

 private:
  struct Option {
    std::string name;
    bool takes_value = false;
    std::function<void(const std::string&)> set;
  };

  BenchArgs& add(const std::string& name, bool takes_value, std::function<void(const std::string&)> set) {
    options_.push_back(Option{name, takes_value, std::move(set)});
    return *this;
  }

  const Option* find(const std::string& name) const {
    for (const Option& option : options_) {
      if (option.name == name) return &option;
    }
    return nullptr;
  }

  // The whole text must be the number: std::stoul alone takes "12abc" as 12, and " -1" or "-1" as a
  // huge count; std::stod takes "inf" and "nan". from_chars reads no sign, space or prefix for unsigned.
  template <typename T>
  static T to_number(const std::string& text) {
    constexpr const char* kWanted = std::is_floating_point_v<T> ? "a finite number >= 0" : "a whole number >= 0";
    T number{};
    const char* end = text.data() + text.size();
    const auto [stop, error] = std::from_chars(text.data(), end, number);
    if (text.empty() || error != std::errc() || stop != end) throw std::invalid_argument(kWanted);
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(number) || number < 0 || text[0] == '-') throw std::invalid_argument(kWanted);
    }
    return number;
  }

  std::string program_, usage_;
  std::vector<Option> options_;
  std::string* positional_ = nullptr;
};

/// `--trace PATH`'s file for one case: PATH-<the case's name, letters and digits, the rest as '-'>.json
/// ("a) 4 x 16 MiB" -> PATH-a-4-x-16-mib.json).
inline std::string trace_file(const std::string& path, const std::string& case_name) {
  std::string part;
  for (const char c : case_name) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) {
      part += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!part.empty() && part.back() != '-') {
      part += '-';
    }
  }
  while (!part.empty() && part.back() == '-') part.pop_back();
  return path + "-" + part + ".json";
}

}  // namespace bench
