#include "ferry/assembly/torchrun_env.h"

#include <charconv>
#include <cstdlib>
#include <string>
#include <system_error>

#include "ferry/pipeline/error.h"

namespace ferry {

namespace {

[[noreturn]] void reject(const char* name, const char* value, const std::string& why) {
  throw Error("environment variable " + std::string(name) + "='" + value + "': " + why);
}

// Decimal digits only. from_chars takes no sign, space or base prefix and reports overflow, but it
// stops at the first non-digit, so trailing text ("3 ", "0x10") and an empty value are caught here.
uint64_t parse(const char* name, const char* value) {
  const char* end = value + std::char_traits<char>::length(value);
  uint64_t result = 0;
  const auto [stop, error] = std::from_chars(value, end, result);
  if (value == end || error != std::errc() || stop != end) reject(name, value, "expected a non-negative integer");
  return result;
}

}  // namespace

std::optional<TorchrunEnv> torchrun_env(const EnvLookup& lookup) {
  const char* rank = lookup("RANK");
  const char* world_size = lookup("WORLD_SIZE");
  const char* local_rank = lookup("LOCAL_RANK");
  if (!rank && !world_size && !local_rank) return std::nullopt;

  const auto set_one = [&]() -> std::string {
    if (rank) return "RANK='" + std::string(rank) + "'";
    if (world_size) return "WORLD_SIZE='" + std::string(world_size) + "'";
    return "LOCAL_RANK='" + std::string(local_rank) + "'";
  };
  if (!world_size) throw Error("environment variable WORLD_SIZE is not set, but " + set_one() + " is");
  if (!rank) throw Error("environment variable RANK is not set, but " + set_one() + " is");

  TorchrunEnv env{};
  env.world_size = parse("WORLD_SIZE", world_size);
  if (env.world_size == 0) reject("WORLD_SIZE", world_size, "expected at least 1");
  env.rank = parse("RANK", rank);
  if (env.rank >= env.world_size) {
    reject("RANK", rank, "must be less than WORLD_SIZE=" + std::to_string(env.world_size));
  }
  env.local_rank = env.rank;
  if (local_rank) {
    env.local_rank = parse("LOCAL_RANK", local_rank);
    if (env.local_rank >= env.world_size) {
      reject("LOCAL_RANK", local_rank, "must be less than WORLD_SIZE=" + std::to_string(env.world_size));
    }
  }
  if (const char* local_world_size = lookup("LOCAL_WORLD_SIZE")) {
    env.local_world_size = parse("LOCAL_WORLD_SIZE", local_world_size);
    if (env.local_world_size == 0 || env.local_world_size > env.world_size) {
      reject("LOCAL_WORLD_SIZE", local_world_size, "expected 1..WORLD_SIZE=" + std::to_string(env.world_size));
    }
    if (local_rank && env.local_rank >= env.local_world_size) {
      reject("LOCAL_RANK", local_rank, "must be less than LOCAL_WORLD_SIZE=" + std::to_string(env.local_world_size));
    }
  }
  return env;
}

std::optional<TorchrunEnv> torchrun_env() {
  return torchrun_env([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace ferry
