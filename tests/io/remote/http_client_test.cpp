// HttpClient against real servers: nginx (HTTP and HTTPS with a certificate made for the test), a proxy
// that injects failures, and an S3 server that checks SigV4 signatures. Every byte is compared with the
// file served; each failure gives an error naming the URL and what happened, or is retried and
// resumed where it was cut.
#include <sys/stat.h>

#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include <ferry/io/remote/http_client.h>
#include <ferry/pipeline/error.h>

#include "tests/support/temp_dir.h"
#include "tests/support/test_servers.h"

namespace ferry {
namespace {

using testing::FaultProxy;
using testing::HttpServer;
using testing::S3Server;

std::string random_bytes(size_t size, uint32_t seed) {
  std::mt19937 random(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(random());
  return bytes;
}

class HttpClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("ferry_http");
    data_ = random_bytes(3'000'000, 7);
    ::mkdir((*dir_ / "data").c_str(), 0755);
    std::ofstream(*dir_ / "data/blob.bin", std::ios::binary) << data_;
    http_ = new HttpServer(*dir_ / "data", *dir_ / "http");
    proxy_ = new FaultProxy(http_->http, *dir_ / "proxy");
  }
  // The S3 server, started by the first test that needs it (each test runs in a process of its own).
  static const S3Server& s3() {
    if (s3_ == nullptr) {
      s3_ = new S3Server(*dir_ / "s3");
      s3_->make_bucket("bucket");
      s3_->put("bucket", "dir/blob.bin", *dir_ / "data/blob.bin");
    }
    return *s3_;
  }
  static void TearDownTestSuite() {
    delete s3_;
    delete proxy_;
    delete http_;
    delete dir_;
  }

  static RemoteOptions fast() {
    RemoteOptions options;
    options.backoff = std::chrono::milliseconds(10);
    options.timeout = std::chrono::milliseconds(1000);
    options.retries = 3;
    return options;
  }
  static RemoteOptions s3_options() {
    RemoteOptions options = fast();
    options.endpoint_url = s3().endpoint;
    return options;
  }
  // Fetches [offset, offset + size) into a string.
  static std::string fetch(const HttpClient& client, const std::string& url, uint64_t offset = 0,
                           std::optional<uint64_t> size = std::nullopt, const ObjectInfo* expect = nullptr) {
    std::string out;
    client.fetch(url, offset, size, expect, [&out](const char* data, size_t n) { out.append(data, n); });
    return out;
  }
  static std::string error_of(const std::function<void()>& call) {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  // The proxy's log lines for `path` (a substring of their path), once it logged at least `expected`: it
  // logs a request after answering it, so a line may come a moment after the client has its answer.
  static std::vector<std::string> requests(const std::string& path, size_t expected) {
    return testing::FaultProxy::lines(proxy_->log, path, expected);
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline std::string data_;
  static inline HttpServer* http_ = nullptr;
  static inline FaultProxy* proxy_ = nullptr;
  static inline S3Server* s3_ = nullptr;
};

// ScopedEnvironment-free: these tests set no AWS variables; the S3 ones pass the account in options and
// the environment's keys (none in CI) would only be used where the options give none.
class AwsKeys {
 public:
  AwsKeys(const char* key, const char* secret) {
    ::setenv("AWS_ACCESS_KEY_ID", key, 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", secret, 1);
    ::setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
    ::setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
  }
  ~AwsKeys() {
    for (const char* name :
         {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"}) {
      ::unsetenv(name);
    }
  }
};

TEST_F(HttpClientTest, ReadsWholeObjectsAndRangesByteForByte) {
  const HttpClient client(fast());
  EXPECT_EQ(fetch(client, http_->http + "/blob.bin"), data_);
  for (const auto& [offset, size] :
       {std::pair<uint64_t, uint64_t>{0, 1}, {1000, 999}, {2'999'000, 1000}, {123'457, 1'500'000}}) {
    EXPECT_EQ(fetch(client, http_->http + "/blob.bin", offset, size), data_.substr(offset, size)) << offset;
  }
  EXPECT_EQ(fetch(client, http_->http + "/blob.bin", 2'000'000), data_.substr(2'000'000));
  const ObjectInfo info = client.stat(http_->http + "/blob.bin");
  EXPECT_EQ(info.size, data_.size());
  EXPECT_FALSE(info.etag.empty());
}

TEST_F(HttpClientTest, HttpsChecksTheCertificateAgainstTheGivenBundle) {
  RemoteOptions options = fast();
  options.ca_bundle = http_->certificate;
  EXPECT_EQ(fetch(HttpClient(options), http_->https + "/blob.bin", 5, 100), data_.substr(5, 100));
  const std::string error = error_of([&] { fetch(HttpClient(fast()), http_->https + "/blob.bin"); });
  EXPECT_NE(error.find("TLS"), std::string::npos) << error;
  EXPECT_NE(error.find("remote.ca_bundle"), std::string::npos) << error;
}

TEST_F(HttpClientTest, MissingObjectsFailAtOnceNamingTheUrlAndStatus) {
  const HttpClient client(fast());
  const std::string url = proxy_->url + "/missing-object.bin";
  const std::string error = error_of([&] { fetch(client, url); });
  EXPECT_NE(error.find(url), std::string::npos) << error;
  EXPECT_NE(error.find("404"), std::string::npos) << error;
  EXPECT_EQ(requests("missing-object", 1).size(), 1u) << "a 404 is not retried";
  const std::string forbidden = error_of([&] { fetch(client, proxy_->url + "/fault/status=403/blob.bin"); });
  EXPECT_NE(forbidden.find("403"), std::string::npos) << forbidden;
  EXPECT_NE(forbidden.find("access denied"), std::string::npos) << forbidden;
}

TEST_F(HttpClientTest, ServerErrorsAreRetriedThenSucceed) {
  const HttpClient client(fast());
  EXPECT_EQ(fetch(client, proxy_->url + "/fault/status=503,times=2/blob.bin", 10, 5000), data_.substr(10, 5000));
  EXPECT_EQ(requests("status=503,times=2", 3).size(), 3u);
  EXPECT_EQ(fetch(client, proxy_->url + "/fault/status=500,times=1/blob.bin"), data_);
  EXPECT_GE(client.counters().retries.load(), 3u);
}

TEST_F(HttpClientTest, TooManyFailuresGiveAnErrorSayingWhatHappened) {
  RemoteOptions options = fast();
  options.retries = 2;
  const HttpClient client(options);
  const std::string error = error_of([&] { fetch(client, proxy_->url + "/fault/status=503/blob.bin"); });
  EXPECT_NE(error.find("503 SlowDown"), std::string::npos) << error;
  EXPECT_NE(error.find("gave up after 3 attempts"), std::string::npos) << error;
}

TEST_F(HttpClientTest, ACutBodyIsResumedFromWhereItWasCut) {
  const HttpClient client(fast());
  EXPECT_EQ(fetch(client, proxy_->url + "/fault/cut=1000000,times=1/blob.bin"), data_);
  const std::vector<std::string> lines = requests("cut=1000000,times=1", 2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("bytes=1000000-"), std::string::npos) << lines[1];
  // Within a range, the rest of the range.
  EXPECT_EQ(fetch(client, proxy_->url + "/fault/cut=500,times=1/blob.bin?r", 100, 2000), data_.substr(100, 2000));
}

TEST_F(HttpClientTest, AResetConnectionIsRetried) {
  const HttpClient client(fast());
  EXPECT_EQ(fetch(client, proxy_->url + "/fault/reset,times=2/blob.bin", 0, 4096), data_.substr(0, 4096));
}

TEST_F(HttpClientTest, AStalledServerTimesOut) {
  RemoteOptions options = fast();
  options.retries = 1;
  const HttpClient client(options);
  EXPECT_EQ(fetch(client, proxy_->url + "/fault/stall=30,times=1/blob.bin", 0, 10), data_.substr(0, 10));
  const std::string error = error_of([&] { fetch(client, proxy_->url + "/fault/stall=30/blob.bin", 0, 10); });
  EXPECT_NE(error.find("stalled"), std::string::npos) << error;
  EXPECT_NE(error.find("remote.timeout"), std::string::npos) << error;
}

TEST_F(HttpClientTest, AnObjectThatChangedSinceItWasIndexedIsAnError) {
  const HttpClient client(fast());
  ObjectInfo seen;
  client.fetch(
      http_->http + "/blob.bin", 0, 10, nullptr, [](const char*, size_t) {}, nullptr, &seen);
  EXPECT_EQ(seen.size, data_.size());
  const std::string error =
      error_of([&] { fetch(client, proxy_->url + "/fault/etag=\"other\"/blob.bin", 0, 10, &seen); });
  EXPECT_NE(error.find("changed since it was indexed"), std::string::npos) << error;
  ObjectInfo smaller = seen;
  smaller.etag.clear();
  smaller.size -= 1;
  const std::string sized = error_of([&] { fetch(client, http_->http + "/blob.bin", 0, 10, &smaller); });
  EXPECT_NE(sized.find("changed since it was indexed"), std::string::npos) << sized;
}

TEST_F(HttpClientTest, AnUnknownHostIsADnsError) {
  const std::string error = error_of([&] { fetch(HttpClient(fast()), "http://no-such-host.invalid/blob.bin"); });
  EXPECT_NE(error.find("DNS"), std::string::npos) << error;
  EXPECT_NE(error.find("no-such-host.invalid"), std::string::npos) << error;
}

TEST_F(HttpClientTest, S3ReadsSignedRangesByteForByte) {
  const AwsKeys keys(S3Server::kAccessKey, S3Server::kSecretKey);
  const HttpClient client(s3_options());
  EXPECT_EQ(fetch(client, "s3://bucket/dir/blob.bin"), data_);
  EXPECT_EQ(fetch(client, "s3://bucket/dir/blob.bin", 77, 300'000), data_.substr(77, 300'000));
  EXPECT_EQ(client.stat("s3://bucket/dir/blob.bin").size, data_.size());
}

TEST_F(HttpClientTest, S3ErrorsSayWhichCredentialOrNameIsWrong) {
  {
    const AwsKeys keys(S3Server::kAccessKey, "wrong-secret");
    const std::string error = error_of([&] { fetch(HttpClient(s3_options()), "s3://bucket/dir/blob.bin"); });
    EXPECT_NE(error.find("403"), std::string::npos) << error;
    EXPECT_NE(error.find("secret key does not match"), std::string::npos) << error;
    EXPECT_NE(error.find("AWS_ACCESS_KEY_ID"), std::string::npos) << error;  // where the keys came from
  }
  {
    const AwsKeys keys("nobody", "whatever");
    const std::string error = error_of([&] { fetch(HttpClient(s3_options()), "s3://bucket/dir/blob.bin"); });
    EXPECT_NE(error.find("403"), std::string::npos) << error;
  }
  const AwsKeys keys(S3Server::kAccessKey, S3Server::kSecretKey);
  const std::string bucket = error_of([&] { fetch(HttpClient(s3_options()), "s3://no-bucket/dir/blob.bin"); });
  EXPECT_NE(bucket.find("404"), std::string::npos) << bucket;
  EXPECT_NE(bucket.find("bucket does not exist"), std::string::npos) << bucket;
  const std::string key = error_of([&] { fetch(HttpClient(s3_options()), "s3://bucket/dir/missing.bin"); });
  EXPECT_NE(key.find("404"), std::string::npos) << key;
  EXPECT_NE(key.find("s3://bucket/dir/missing.bin"), std::string::npos) << key;
  RemoteOptions anonymous = s3_options();
  anonymous.anonymous = true;
  const std::string unsigned_error = error_of([&] { fetch(HttpClient(anonymous), "s3://bucket/dir/blob.bin"); });
  EXPECT_NE(unsigned_error.find("403"), std::string::npos) << unsigned_error;
  EXPECT_NE(unsigned_error.find("give credentials"), std::string::npos) << unsigned_error;
}

}  // namespace
}  // namespace ferry
