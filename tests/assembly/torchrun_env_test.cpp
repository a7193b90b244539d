#include <ferry/assembly/torchrun_env.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include <ferry/pipeline/error.h>

namespace ferry {
namespace {

using Vars = std::map<std::string, std::string>;

// A fake environment: only the variables in `vars` are set.
std::optional<TorchrunEnv> read(const Vars& vars) {
  return torchrun_env([&vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

void expect_rejected(const Vars& vars, const std::string& expected_text) {
  std::string where;
  for (const auto& [name, value] : vars) where += name + "='" + value + "' ";
  SCOPED_TRACE(where);
  try {
    read(vars);
    FAIL() << "no throw; expected \"" << expected_text << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected_text), std::string::npos) << e.what();
  }
}

TEST(TorchrunEnv, NothingSetMeansNotLaunchedByTorchrun) {
  EXPECT_FALSE(read({}).has_value());
  EXPECT_FALSE(read({{"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "x"}}).has_value());
}

TEST(TorchrunEnv, ReadsAllThreeVariables) {
  const auto env = read({{"RANK", "5"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "1"}});
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rank, 5u);
  EXPECT_EQ(env->world_size, 16u);
  EXPECT_EQ(env->local_rank, 1u);

  const auto single = read({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}});
  ASSERT_TRUE(single.has_value());
  EXPECT_EQ(single->rank, 0u);
  EXPECT_EQ(single->world_size, 1u);
  EXPECT_EQ(single->local_rank, 0u);

  const auto big = read({{"RANK", "18446744073709551614"}, {"WORLD_SIZE", "18446744073709551615"}});
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->rank, 18446744073709551614u);
}

TEST(TorchrunEnv, LocalRankDefaultsToRank) {
  const auto env = read({{"RANK", "3"}, {"WORLD_SIZE", "4"}});
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rank, 3u);
  EXPECT_EQ(env->local_rank, 3u);
}

TEST(TorchrunEnv, RejectsMalformedValuesNamingTheVariable) {
  for (const std::string bad : {"x", "", "-1", "+1", " 1", "1 ", "1.0", "0x10", "3x", "18446744073709551616"}) {
    expect_rejected({{"RANK", bad}, {"WORLD_SIZE", "4"}},
                    "environment variable RANK='" + bad + "': expected a non-negative integer");
    expect_rejected({{"RANK", "0"}, {"WORLD_SIZE", bad}},
                    "environment variable WORLD_SIZE='" + bad + "': expected a non-negative integer");
    expect_rejected({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", bad}},
                    "environment variable LOCAL_RANK='" + bad + "': expected a non-negative integer");
  }
}

TEST(TorchrunEnv, RejectsInconsistentValuesNamingTheVariable) {
  expect_rejected({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE='0'");
  expect_rejected({{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "RANK='4': must be less than WORLD_SIZE=4");
  expect_rejected({{"RANK", "9"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, "RANK='9'");
  expect_rejected({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}}, "LOCAL_RANK='2'");
}

TEST(TorchrunEnv, ReadsLocalWorldSizeAndChecksItAgainstTheRanks) {
  EXPECT_EQ(read({{"RANK", "3"}, {"WORLD_SIZE", "8"}})->local_world_size, 1u);  // unset: one per machine
  const auto env = read({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}});
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->local_world_size, 4u);
  expect_rejected({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "0"}},
                  "LOCAL_WORLD_SIZE='0': expected 1..WORLD_SIZE=2");
  expect_rejected({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "3"}}, "LOCAL_WORLD_SIZE='3'");
  expect_rejected({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "two"}},
                  "LOCAL_WORLD_SIZE='two': expected a non-negative integer");
  expect_rejected({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}},
                  "LOCAL_RANK='3': must be less than LOCAL_WORLD_SIZE=2");
}

TEST(TorchrunEnv, RejectsAPartialSetNamingTheMissingVariable) {
  expect_rejected({{"RANK", "0"}}, "WORLD_SIZE is not set");
  expect_rejected({{"LOCAL_RANK", "0"}}, "WORLD_SIZE is not set");
  expect_rejected({{"WORLD_SIZE", "2"}}, "RANK is not set");
  expect_rejected({{"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}, "RANK is not set");
}

// Saves RANK, WORLD_SIZE and LOCAL_RANK and puts them back, even when an assertion returns early.
class SavedTorchrunVariables {
 public:
  SavedTorchrunVariables() {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
    }
  }
  ~SavedTorchrunVariables() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  static constexpr const char* kNames[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK"};

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(TorchrunEnv, ReadsTheProcessEnvironment) {
  // The only test that touches the real environment (single-threaded here).
  const SavedTorchrunVariables saved;
  for (const char* name : SavedTorchrunVariables::kNames) ::unsetenv(name);
  EXPECT_FALSE(torchrun_env().has_value());
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "8", 1);
  const auto env = torchrun_env();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rank, 2u);
  EXPECT_EQ(env->world_size, 8u);
  EXPECT_EQ(env->local_rank, 2u);
  ::setenv("LOCAL_RANK", "x", 1);
  EXPECT_THROW(torchrun_env(), Error);
}

}  // namespace
}  // namespace ferry
