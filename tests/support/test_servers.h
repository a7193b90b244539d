#pragma once

// The real servers remote-data tests read from, started from tests/servers/ for one test: nginx over HTTP
// and HTTPS, a proxy in front of it that injects failures, and an S3 server (OpenStack Swift's S3 API,
// which checks SigV4 signatures). Each is stopped, with everything it started, when its object goes.

#include <memory>
#include <string>
#include <vector>

#include "tests/support/child_process.h"

namespace ferry::testing {

/// One server script run as a child process. Waits for it to write its endpoint file.
class TestServer {
 public:
  /// Runs `/usr/bin/python3 tests/servers/<script> args...`, waiting up to 60 s for `endpoint_file`.
  /// Throws std::runtime_error with the server's stderr when it does not come up (a package missing:
  /// scripts/install-deps.sh installs what the tests need).
  TestServer(const std::string& script, std::vector<std::string> args, const std::string& endpoint_file);
  ~TestServer();
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  /// The endpoint file's words ("http://127.0.0.1:P", ...).
  const std::vector<std::string>& endpoint() const noexcept { return words_; }

 private:
  std::unique_ptr<Child> child_;
  std::vector<std::string> words_;
};

/// nginx serving `root` on 127.0.0.1: http, https and the certificate the https one is signed with.
struct HttpServer {
  HttpServer(const std::string& root, const std::string& state);
  std::string http, https, certificate;
  TestServer server;
};

/// The failure-injecting proxy before `upstream` (tests/servers/fault_proxy.py): a request for
/// /fault/<SPEC>/<path> fails as SPEC says (status=503,times=2; reset; cut=BYTES; stall=SECONDS; ...).
struct FaultProxy {
  FaultProxy(const std::string& upstream, const std::string& state);
  std::string url;  // http://127.0.0.1:P
  std::string log;  // one JSON line per request
  TestServer server;
  /// The lines of `log` whose text holds `part`, once there are at least `expected` (waiting up to 10 s,
  /// then 50 ms more for any later one): the proxy logs a request just after answering it.
  static std::vector<std::string> lines(const std::string& log, const std::string& part, size_t expected);
};

/// An S3 server with one account (access key "ferry", secret "ferry-secret", region us-east-1); its
/// buckets are made and filled with curl --aws-sigv4 (put()).
struct S3Server {
  explicit S3Server(const std::string& state);
  std::string endpoint;  // http://127.0.0.1:P
  static constexpr const char* kAccessKey = "ferry";
  static constexpr const char* kSecretKey = "ferry-secret";
  /// Makes `bucket` (PUT) where missing.
  void make_bucket(const std::string& bucket) const;
  /// Uploads `file` as s3://bucket/key. Throws std::runtime_error when the server refuses it.
  void put(const std::string& bucket, const std::string& key, const std::string& file) const;
  TestServer server;
};

}  // namespace ferry::testing
