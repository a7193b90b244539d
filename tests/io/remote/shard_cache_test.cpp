// ShardCache: each extent fetched once (by threads, and by processes sharing the folder), nothing partial
// ever taken as complete (a fetch killed with -9 leaves nothing that blocks the next), the extent needed
// furthest ahead dropped first (by this process's reads and the others'), prefetch along the order, and a
// budget too small for its readers refused.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/io/remote/shard_cache.h>
#include <ferry/pipeline/error.h>

#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

// The bytes of extent `n`: its number repeated, `size` bytes.
std::string content(uint32_t n, size_t size) {
  std::string text;
  while (text.size() < size) text += std::to_string(n) + ",";
  text.resize(size);
  return text;
}

CacheExtent extent(uint32_t n, size_t size, std::atomic<int>* produced = nullptr,
                   std::chrono::milliseconds pause = 0ms) {
  CacheExtent e;
  e.key = "extent-" + std::to_string(n);
  e.what = "test extent " + std::to_string(n);
  e.bytes = size;
  e.produce = [n, size, produced, pause](const std::function<void(const char*, size_t)>& sink,
                                         const std::atomic<bool>*) {
    if (produced != nullptr) produced->fetch_add(1);
    const std::string text = content(n, size);
    sink(text.data(), text.size() / 2);
    std::this_thread::sleep_for(pause);
    sink(text.data() + text.size() / 2, text.size() - text.size() / 2);
  };
  return e;
}

std::string read_all(const CachedFile& file) {
  std::string text(file.size(), '\0');
  file.read(0, text.size(), text.data(), "test");
  return text;
}

// An order that reads extent steps[i] at step i; the test moves `reached` on.
class ListOrder : public FetchOrder {
 public:
  explicit ListOrder(std::vector<uint32_t> steps) : steps_(std::move(steps)) {}
  bool extents_at(uint64_t step, std::vector<uint32_t>& out) const override {
    if (step >= steps_.size()) return false;
    out.push_back(steps_[step]);
    return true;
  }
  uint64_t reached() const override { return reached_.load(); }
  std::atomic<uint64_t> reached_{0};

 private:
  std::vector<uint32_t> steps_;
};

size_t count_files(const std::string& folder) {
  const testing::Result listing = testing::run_program({"/bin/ls", "-A", folder}, 10s);
  std::istringstream lines(listing.out);
  size_t count = 0;
  for (std::string line; std::getline(lines, line);) count += line.empty() ? 0 : 1;
  return count;
}

bool wait_for(const std::function<bool()>& done, std::chrono::seconds limit = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST(ShardCache, ThreadsAskingAtOnceGetOneFetch) {
  testing::TempDir dir;
  ShardCache cache({.dir = dir / "cache", .max_bytes = 0, .prefetch = 0, .fetchers = 1});
  std::atomic<int> produced{0};
  const uint32_t id = cache.add(extent(7, 1'000'000, &produced, 100ms));
  std::vector<std::thread> threads;
  std::atomic<int> right{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] { right += read_all(*cache.get(id)) == content(7, 1'000'000) ? 1 : 0; });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(produced.load(), 1);
  EXPECT_EQ(right.load(), 6);
  EXPECT_EQ(cache.counters().fetched_bytes.load(), 1'000'000u);
  EXPECT_EQ(count_files(dir / "cache/partial"), 0u);
}

TEST(ShardCache, AFailedFetchLeavesNothingAndIsTriedAgain) {
  testing::TempDir dir;
  ShardCache cache({.dir = dir / "cache", .max_bytes = 0, .prefetch = 0, .fetchers = 1});
  std::atomic<int> calls{0};
  CacheExtent failing = extent(3, 5000);
  failing.produce = [&calls](const std::function<void(const char*, size_t)>& sink, const std::atomic<bool>*) {
    sink("half", 4);
    if (calls.fetch_add(1) == 0) throw Error("the server hung up");
    const std::string rest = content(3, 4996);
    sink(rest.data(), rest.size());
  };
  const uint32_t id = cache.add(failing);
  try {
    cache.get(id);
    ADD_FAILURE() << "a failed fetch gave a file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the server hung up"), std::string::npos);
  }
  EXPECT_EQ(count_files(dir / "cache/partial"), 0u);
  EXPECT_EQ(count_files(dir / "cache/data"), 0u);
  EXPECT_EQ(read_all(*cache.get(id)), "half" + content(3, 4996));
  EXPECT_EQ(calls.load(), 2);
}

// A child process for the tests below: fetches extent 1 into FERRY_TEST_CACHE, marking each fetch with a
// line in FERRY_TEST_CACHE_LOG, pausing FERRY_TEST_CACHE_PAUSE_MS in the middle.
TEST(ShardCacheChild, Fetch) {
  const char* folder = std::getenv("FERRY_TEST_CACHE");
  if (folder == nullptr) GTEST_SKIP() << "run by the tests below as a process of their own";
  const std::string log = std::getenv("FERRY_TEST_CACHE_LOG");
  const int pause = std::atoi(std::getenv("FERRY_TEST_CACHE_PAUSE_MS"));
  ShardCache cache({.dir = folder, .max_bytes = 0, .prefetch = 0, .fetchers = 1});
  CacheExtent e = extent(1, 3'000'000, nullptr, std::chrono::milliseconds(pause));
  auto produce = e.produce;
  e.produce = [log, produce](const std::function<void(const char*, size_t)>& sink, const std::atomic<bool>* stop) {
    std::ofstream(log, std::ios::app) << getpid() << "\n";
    produce(sink, stop);
  };
  const uint32_t id = cache.add(e);
  EXPECT_EQ(read_all(*cache.get(id)), content(1, 3'000'000));
}

std::vector<std::string> child_argv() {
  char self[4096] = {};
  const ssize_t got = ::readlink("/proc/self/exe", self, sizeof self - 1);
  return {std::string(self, static_cast<size_t>(std::max<ssize_t>(got, 0))), "--gtest_filter=ShardCacheChild.Fetch"};
}

size_t lines_in(const std::string& path) {
  std::ifstream in(path);
  size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

TEST(ShardCache, ProcessesSharingTheFolderFetchEachExtentOnce) {
  testing::TempDir dir;
  ::setenv("FERRY_TEST_CACHE", (dir / "cache").c_str(), 1);
  ::setenv("FERRY_TEST_CACHE_LOG", (dir / "fetches").c_str(), 1);
  ::setenv("FERRY_TEST_CACHE_PAUSE_MS", "300", 1);
  std::vector<std::unique_ptr<testing::Child>> children;
  for (int c = 0; c < 4; ++c) children.push_back(std::make_unique<testing::Child>(child_argv()));
  for (auto& child : children) {
    const auto [status, when] = child->wait(testing::Clock::now() + 120s);
    EXPECT_TRUE(status.is(0)) << status << "\n" << child->out() << child->err();
  }
  ::unsetenv("FERRY_TEST_CACHE");
  EXPECT_EQ(lines_in(dir / "fetches"), 1u);
  EXPECT_EQ(count_files(dir / "cache/partial"), 0u);
}

TEST(ShardCache, AFetchKilledWithMinus9LeavesNothingThatBlocksTheNextRun) {
  testing::TempDir dir;
  ::setenv("FERRY_TEST_CACHE", (dir / "cache").c_str(), 1);
  ::setenv("FERRY_TEST_CACHE_LOG", (dir / "fetches").c_str(), 1);
  ::setenv("FERRY_TEST_CACHE_PAUSE_MS", "60000", 1);
  testing::Child child(child_argv());
  ::unsetenv("FERRY_TEST_CACHE");
  // Killed in the middle of writing its extent: half of it is in a partial file, its lock is held.
  ASSERT_TRUE(wait_for([&] { return count_files(dir / "cache/partial") == 1; })) << child.err();
  ::kill(child.pid(), SIGKILL);
  child.wait(testing::Clock::now() + 30s);
  ASSERT_EQ(count_files(dir / "cache/data"), 0u);

  ShardCache cache({.dir = dir / "cache", .max_bytes = 0, .prefetch = 0, .fetchers = 1});
  EXPECT_EQ(count_files(dir / "cache/partial"), 0u) << "the dead fetch's partial file is removed";
  std::atomic<int> produced{0};
  const uint32_t id = cache.add(extent(1, 3'000'000, &produced));
  EXPECT_EQ(read_all(*cache.get(id)), content(1, 3'000'000));  // its lock died with it
  EXPECT_EQ(produced.load(), 1);
}

TEST(ShardCache, DropsTheExtentReadFurthestAhead) {
  testing::TempDir dir;
  // Room for three extents of 1000 bytes.
  ShardCache cache({.dir = dir / "cache", .max_bytes = 3000, .prefetch = 0, .fetchers = 1});
  std::vector<std::atomic<int>> produced(5);
  std::vector<uint32_t> ids;
  for (uint32_t n = 0; n < 5; ++n) ids.push_back(cache.add(extent(n, 1000, &produced[n])));
  // Reads 0 1 2, then 3, then 1 0 2 4 2.
  auto order = std::make_shared<ListOrder>(std::vector<uint32_t>{0, 1, 2, 3, 1, 0, 2, 4, 2});
  cache.follow(order, 1);
  for (uint64_t step = 0; step < 9; ++step) {
    order->reached_ = step;
    const uint32_t n = std::vector<uint32_t>{0, 1, 2, 3, 1, 0, 2, 4, 2}[step];
    EXPECT_EQ(read_all(*cache.get(ids[n])), content(n, 1000)) << "step " << step;
  }
  // Fetching 3 at step 3 drops 2 (read at step 6, after 1 and 0); fetching 4 at step 7 drops 1 or 0 (never
  // read again), not 2. Belady's fetches for this order: 0 1 2 3 2 4, six.
  EXPECT_EQ(produced[0].load() + produced[1].load() + produced[2].load() + produced[3].load() + produced[4].load(), 6);
  EXPECT_EQ(produced[2].load(), 2);
  EXPECT_LE(cache.used_bytes(), 3000u);
}

TEST(ShardCache, FetchesAheadInTheOrderTheReadingTakes) {
  testing::TempDir dir;
  ShardCache cache({.dir = dir / "cache", .max_bytes = 0, .prefetch = 2, .fetchers = 2});
  std::vector<std::atomic<int>> produced(6);
  std::vector<uint32_t> ids;
  for (uint32_t n = 0; n < 6; ++n) ids.push_back(cache.add(extent(n, 1000, &produced[n])));
  auto order = std::make_shared<ListOrder>(std::vector<uint32_t>{4, 4, 2, 2, 0, 0, 5, 5, 1, 1, 3, 3});
  cache.follow(order, 1);
  ASSERT_TRUE(wait_for([&] { return produced[4] == 1 && produced[2] == 1 && produced[0] == 1; }));
  std::this_thread::sleep_for(200ms);  // it would have fetched more by now
  EXPECT_EQ(produced[5] + produced[1] + produced[3], 0) << "only the extent read now and the next two";
  order->reached_ = 4;  // the reading moved on to extent 0
  ASSERT_TRUE(wait_for([&] { return produced[5] == 1 && produced[1] == 1; }));
  EXPECT_EQ(read_all(*cache.get(ids[0])), content(0, 1000));
  EXPECT_EQ(produced[0].load(), 1);
}

TEST(ShardCache, AnExtentAnotherProcessReadsSoonIsKeptOverOneNobodyReads) {
  testing::TempDir dir;
  // Two caches on one folder, as two ranks' processes are; room for two extents.
  ShardCache mine({.dir = dir / "cache", .max_bytes = 2000, .prefetch = 0, .fetchers = 1});
  ShardCache other({.dir = dir / "cache", .max_bytes = 2000, .prefetch = 0, .fetchers = 1});
  // A dead process's plan (no one holds its lock) that says extent 0 is read at once: removed, not heeded.
  { std::ofstream(dir / "cache/plans/999999-0.plan") << "extent-0 0\n"; }
  { std::ofstream(dir / "cache/plans/999999-0.lock"); }
  std::vector<std::atomic<int>> produced(3);
  std::vector<uint32_t> mine_ids, other_ids;
  for (uint32_t n = 0; n < 3; ++n) {
    mine_ids.push_back(mine.add(extent(n, 1000, &produced[n])));
    other_ids.push_back(other.add(extent(n, 1000, &produced[n])));
  }
  auto others_order = std::make_shared<ListOrder>(std::vector<uint32_t>(100, 1));  // reads extent 1 on and on
  other.follow(others_order, 1);
  EXPECT_EQ(read_all(*other.get(other_ids[1])), content(1, 1000));
  // Mine reads 1 (the other's), then 0, then 2: room for 2 means dropping 1 or 0, neither of which it reads
  // again. By itself it would drop 1, read least recently; the other reads 1 next, so 0 goes.
  auto my_order = std::make_shared<ListOrder>(std::vector<uint32_t>{1, 0, 2});
  mine.follow(my_order, 1);
  std::this_thread::sleep_for(600ms);  // the plans are shared every 200 ms
  for (uint64_t step = 0; step < 3; ++step) {
    my_order->reached_ = step;
    const uint32_t n = std::vector<uint32_t>{1, 0, 2}[step];
    EXPECT_EQ(read_all(*mine.get(mine_ids[n])), content(n, 1000)) << "step " << step;
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "cache/data/extent-1")) << "dropped what the other reads next";
  EXPECT_FALSE(std::filesystem::exists(dir / "cache/data/extent-0"));
  EXPECT_EQ(read_all(*other.get(other_ids[1])), content(1, 1000));
  EXPECT_EQ(produced[1].load(), 1);
  EXPECT_FALSE(std::filesystem::exists(dir / "cache/plans/999999-0.plan")) << "a dead process's plan stays";
}

TEST(ShardCache, FollowRefusesABudgetTooSmallForItsReaders) {
  testing::TempDir dir;
  ShardCache cache({.dir = dir / "cache", .max_bytes = 2500, .prefetch = 0, .fetchers = 1});
  std::vector<uint32_t> steps;
  for (uint32_t n = 0; n < 4; ++n) steps.push_back(cache.add(extent(n, 1000)));
  EXPECT_NO_THROW(cache.follow(std::make_shared<ListOrder>(steps), 2));
  try {
    cache.follow(std::make_shared<ListOrder>(steps), 3);
    ADD_FAILURE() << "3 readers of 1000-byte extents in 2500 bytes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("remote.max_bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at least 3000"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
