// Tar shards read over every route ferry offers — HTTP, HTTPS, S3, compressed (gzip, zstd, xz), pipe: —
// give the same samples, byte for byte, as the same shards read locally; a pipeline over them delivers
// the same batches; a kept index spares fetching; the cache fetches no more than Belady's rule needs.
#include <ATen/ops/equal.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include <ferry/io/formats/tar_shard_source.h>
#include <ferry/io/formats/tar_writer.h>
#include <ferry/io/samplers/shard_shuffle_sampler.h>
#include <ferry/pipeline/error.h>
#include <ferry/stages/standard_pipeline.h>

#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::FaultProxy;
using testing::HttpServer;
using testing::S3Server;

constexpr size_t kShards = 5;
constexpr int64_t kDataBytes = 4096;

class RemoteSourceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("ferry_remote");
    const std::string data = *dir_ / "data";
    ::mkdir(data.c_str(), 0755);
    std::mt19937 random(11);
    for (size_t s = 0; s < kShards; ++s) {
      TarWriter tar;
      const size_t samples = 20 + random() % 30;
      for (size_t i = 0; i < samples; ++i) {
        const std::string key = "s" + std::to_string(s) + "/" + std::to_string(i);
        std::string bytes(kDataBytes, '\0');
        for (char& c : bytes) c = static_cast<char>(random());
        tar.add(key + ".bin", bytes);
        tar.add(key + ".cls", std::to_string(random() % 1000));
      }
      const std::string name = data + "/shard-" + std::to_string(s) + ".tar";
      TarWriter::write_file(name, tar.finish());
      for (const char* compress : {"gzip -c", "zstd -q -c", "xz -c"}) {
        const std::string suffix = compress[0] == 'g' ? ".gz" : compress[0] == 'z' ? ".zst" : ".xz";
        const auto made =
            testing::run_program({"/bin/sh", "-c", std::string(compress) + " " + name + " > " + name + suffix}, 60s);
        ASSERT_TRUE(made.status.is(0)) << compress << ": " << made.err;
      }
    }
    http_ = new HttpServer(data, *dir_ / "http");
    proxy_ = new FaultProxy(http_->http, *dir_ / "proxy");
    ::setenv("AWS_ACCESS_KEY_ID", S3Server::kAccessKey, 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", S3Server::kSecretKey, 1);
  }
  // The S3 server with the shards, started by the first test that needs it (each test runs in a process
  // of its own).
  static const S3Server& s3() {
    if (s3_ == nullptr) {
      s3_ = new S3Server(*dir_ / "s3");
      s3_->make_bucket("shards");
      for (size_t s = 0; s < kShards; ++s) {
        for (const char* suffix : {".tar", ".tar.xz"}) {
          const std::string name = "shard-" + std::to_string(s) + suffix;
          s3_->put("shards", "train/" + name, *dir_ / ("data/" + name));
        }
      }
    }
    return *s3_;
  }
  static void TearDownTestSuite() {
    ::unsetenv("AWS_ACCESS_KEY_ID");
    ::unsetenv("AWS_SECRET_ACCESS_KEY");
    delete s3_;
    delete proxy_;
    delete http_;
    delete dir_;
  }

  static std::string range() { return "{0.." + std::to_string(kShards - 1) + "}"; }
  // Options with a cache folder of their own, so that nothing is shared with another case.
  static RemoteOptions remote(const std::string& name) {
    RemoteOptions options;
    options.cache_dir = *dir_ / ("cache-" + name);
    if (s3_ != nullptr) options.endpoint_url = s3_->endpoint;
    options.ca_bundle = http_->certificate;
    options.backoff = 10ms;
    return options;
  }
  static std::shared_ptr<TarShardSource> source(const std::string& pattern, const RemoteOptions& options) {
    TarShardOptions tar;
    tar.shards = TarShardSource::expand_braces(pattern);
    tar.remote = options;
    tar.fields = {TarField{.name = "data", .extension = "bin", .shape = {kDataBytes}},
                  TarField{.name = "label", .extension = "cls", .dtype = at::kLong, .shape = {}, .decoder = "label"}};
    return std::make_shared<TarShardSource>(std::move(tar));
  }
  static std::string local() { return *dir_ / ("data/shard-" + range() + ".tar"); }

  // Every sample of `remote` equals the local one: fields byte for byte, keys after the shard's name.
  static void expect_same_samples(const TarShardSource& remote_source, const std::string& route) {
    const auto reference = source(local(), RemoteOptions{});
    ASSERT_EQ(remote_source.size(), reference->size()) << route;
    EXPECT_EQ(remote_source.shard_sizes(), reference->shard_sizes()) << route;
    for (uint64_t i = 0; i < reference->size(); ++i) {
      const EncodedSample want = reference->read(i);
      const EncodedSample got = remote_source.read(i);
      ASSERT_EQ(got.fields.size(), want.fields.size());
      for (size_t f = 0; f < want.fields.size(); ++f) {
        ASSERT_TRUE(at::equal(got.fields[f], want.fields[f])) << route << " sample " << i << " field " << f;
      }
      EXPECT_EQ(got.key.substr(got.key.rfind(':')), want.key.substr(want.key.rfind(':'))) << route;
    }
  }

  // The proxy's requests for `part` so far, once there are at least `expected`.
  static size_t requests_for(const std::string& part, size_t expected = 0) {
    return FaultProxy::lines(proxy_->log, part, expected).size();
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline HttpServer* http_ = nullptr;
  static inline FaultProxy* proxy_ = nullptr;
  static inline S3Server* s3_ = nullptr;
};

TEST_F(RemoteSourceTest, EveryRouteGivesTheLocalSamples) {
  s3();
  const std::string data = *dir_ / "data";
  const std::map<std::string, std::string> routes = {
      {"http", http_->http + "/shard-" + range() + ".tar"},
      {"https", http_->https + "/shard-" + range() + ".tar"},
      {"s3", "s3://shards/train/shard-" + range() + ".tar"},
      {"gzip", data + "/shard-" + range() + ".tar.gz"},
      {"zstd-http", http_->http + "/shard-" + range() + ".tar.zst"},
      {"xz-s3", "s3://shards/train/shard-" + range() + ".tar.xz"},
      {"pipe", "pipe:cat " + data + "/shard-" + range() + ".tar"},
      {"pipe-gzip", "pipe:cat " + data + "/shard-" + range() + ".tar.gz"},
  };
  for (const auto& [route, pattern] : routes) {
    SCOPED_TRACE(route);
    expect_same_samples(*source(pattern, remote(route)), route);
  }
}

TEST_F(RemoteSourceTest, APipelineOverHttpDeliversTheLocalBatches) {
  for (const size_t threads : {size_t{1}, size_t{3}}) {
    std::vector<std::vector<at::Tensor>> runs;
    for (const std::string& pattern : {local(), proxy_->url + "/shard-" + range() + ".tar"}) {
      const auto tar = source(pattern, remote("pipeline-" + std::to_string(threads)));
      PipelineOptions options;
      options.device = "cpu";
      options.batch_size = 7;
      options.epochs = 2;
      options.decode_threads = threads;
      const auto sampler = std::make_shared<ShardShuffleSampler>(
          tar->shard_sizes(), ShardShuffleSampler::Options{.seed = 3, .buffer_size = 16, .shuffle_shards = true});
      Pipeline pipeline = make_pipeline(tar, options, sampler);
      std::vector<at::Tensor> tensors;
      while (auto batch = pipeline.next()) {
        tensors.push_back((*batch)["data"].clone());
        tensors.push_back((*batch)["label"].clone());
      }
      runs.push_back(std::move(tensors));
    }
    ASSERT_EQ(runs[0].size(), runs[1].size());
    for (size_t t = 0; t < runs[0].size(); ++t) EXPECT_TRUE(at::equal(runs[0][t], runs[1][t])) << t;
  }
}

TEST_F(RemoteSourceTest, AKeptIndexSparesFetchingTheShards) {
  const std::string pattern = proxy_->url + "/shard-" + range() + ".tar?kept";
  const RemoteOptions options = remote("kept");
  const size_t before = requests_for("?kept");
  source(pattern, options);
  EXPECT_EQ(requests_for("?kept", before + kShards) - before, kShards) << "indexing fetched each shard once";
  // A new run: its data is gone from the cache, its index is kept.
  testing::run_program({"/bin/sh", "-c", "rm -f " + options.cache_dir + "/data/*"}, 30s);
  const auto again = source(pattern, options);
  EXPECT_EQ(requests_for("?kept") - before, kShards) << "the kept index spared the fetches";
  again->read(again->shard_samples(2).begin);  // reading one shard fetches that one
  EXPECT_EQ(requests_for("?kept", before + kShards + 1) - before, kShards + 1);
  expect_same_samples(*again, "kept index");
}

TEST_F(RemoteSourceTest, AShardChangedSinceItWasIndexedIsAnErrorAndIsIndexedAnewNextRun) {
  const std::string data = *dir_ / "data";
  testing::run_program({"/bin/cp", data + "/shard-1.tar", data + "/changing.tar"}, 30s);
  const RemoteOptions options = remote("changing");
  const std::string url = http_->http + "/changing.tar";
  source(url, options);
  testing::run_program({"/bin/sh", "-c", "rm -f " + options.cache_dir + "/data/*"}, 30s);
  testing::run_program({"/bin/cp", data + "/shard-2.tar", data + "/changing.tar"}, 30s);
  const auto stale = source(url, options);
  try {
    stale->read(0);
    ADD_FAILURE() << "a changed shard was read with its old index";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("changed since it was indexed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
  }
  const auto fresh = source(url, options);
  EXPECT_EQ(fresh->size(), source(data + "/shard-2.tar", RemoteOptions{})->size());
}

TEST_F(RemoteSourceTest, AFailingPipeCommandNamesItsStatusAndStderr) {
  try {
    source("pipe:echo no such bucket >&2; exit 3", remote("pipe-fails"));
    ADD_FAILURE() << "a failing command made a source";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exited with status 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no such bucket"), std::string::npos) << e.what();
  }
}

TEST_F(RemoteSourceTest, MissingShardsAndBucketsNameTheUrl) {
  const std::string url = http_->http + "/shard-404.tar";
  try {
    source(url, remote("missing"));
    ADD_FAILURE() << "a missing shard made a source";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("404"), std::string::npos) << e.what();
  }
  s3();
  try {
    source("s3://no-such-bucket/shard-0.tar", remote("missing-bucket"));
    ADD_FAILURE() << "a missing bucket made a source";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bucket does not exist"), std::string::npos) << e.what();
  }
}

// The fewest fetches any cache of `slots` shards can do for `order` (Belady's rule).
size_t fewest_fetches(const std::vector<size_t>& order, size_t slots) {
  std::set<size_t> held;
  size_t fetches = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (held.count(order[i]) != 0) continue;
    ++fetches;
    if (held.size() == slots) {
      size_t drop = *held.begin(), furthest = 0;
      for (const size_t shard : held) {
        size_t next = i + 1;
        while (next < order.size() && order[next] != shard) ++next;
        if (next >= furthest) {
          furthest = next;
          drop = shard;
        }
      }
      held.erase(drop);
    }
    held.insert(order[i]);
  }
  return fetches;
}

TEST_F(RemoteSourceTest, AHalfSizeCacheFetchesWithinFivePercentOfTheFewestPossible) {
  const auto sizing = source(local(), RemoteOptions{});
  uint64_t largest = 0, total = 0;
  for (size_t s = 0; s < kShards; ++s) {
    largest = std::max(largest, sizing->shard(s).file_size());
    total += sizing->shard(s).file_size();
  }
  const std::string pattern = http_->http + "/shard-" + range() + ".tar";
  // Shards shuffled each epoch and a few fetched ahead; in order (where Belady's rule keeps one slot
  // turning over, and the two decode threads straddle each shard boundary) and many fetched ahead.
  for (const bool shuffled : {true, false}) {
    SCOPED_TRACE(shuffled ? "shuffled, 2 ahead" : "in order, 8 ahead");
    RemoteOptions options = remote(shuffled ? "half-shuffled" : "half-in-order");
    options.max_bytes = std::max(total / 2, 2 * largest);
    options.prefetch = shuffled ? 2 : 8;
    source(pattern, options);  // indexed (each shard fetched once); the run below starts from the kept indexes
    const std::string indexed = options.cache_dir;
    options.cache_dir += "-run";
    ::mkdir(options.cache_dir.c_str(), 0755);
    testing::run_program({"/bin/cp", "-r", indexed + "/index", options.cache_dir}, 30s);
    const auto tar = source(pattern, options);
    PipelineOptions pipeline_options;
    pipeline_options.device = "cpu";
    pipeline_options.batch_size = 8;
    pipeline_options.epochs = 2;
    pipeline_options.decode_threads = 2;
    const auto sampler = std::make_shared<ShardShuffleSampler>(
        tar->shard_sizes(),
        ShardShuffleSampler::Options{.seed = 9, .buffer_size = shuffled ? 4u : 1u, .shuffle_shards = shuffled});
    Pipeline pipeline = make_pipeline(tar, pipeline_options, sampler);
    size_t batches = 0;
    while (pipeline.next()) ++batches;
    EXPECT_GT(batches, 0u);
    std::vector<size_t> order;
    for (uint64_t epoch = 0; epoch < 2; ++epoch) {
      for (uint64_t p = 0; p < sampler->epoch_size(); ++p) {
        const size_t shard = tar->shard_of(sampler->index(epoch, p));
        if (order.empty() || order.back() != shard) order.push_back(shard);
      }
    }
    const size_t slots = static_cast<size_t>(options.max_bytes / largest);
    const size_t fewest = fewest_fetches(order, std::min(slots, kShards));
    const auto store = DataStore::get(options);
    const uint64_t fetches = store->cache().counters().fetches.load();
    EXPECT_LE(static_cast<double>(fetches), 1.05 * static_cast<double>(fewest))
        << "fetched " << fetches << ", fewest possible " << fewest << " (" << slots << " shards fit)";
    EXPECT_LE(store->cache().used_bytes(), options.max_bytes);
  }
}

}  // namespace
}  // namespace ferry
