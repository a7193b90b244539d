#include "tests/support/test_servers.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ferry::testing {
namespace {

using namespace std::chrono_literals;

std::string script_path(const std::string& script) {
  return std::string(FERRY_SOURCE_DIR) + "/tests/servers/" + script;
}

}  // namespace

TestServer::TestServer(const std::string& script, std::vector<std::string> args, const std::string& endpoint_file) {
  std::vector<std::string> argv{"/usr/bin/python3", script_path(script)};
  argv.insert(argv.end(), args.begin(), args.end());
  ::unlink(endpoint_file.c_str());
  child_ = std::make_unique<Child>(argv);
  const auto deadline = Clock::now() + 60s;
  for (;;) {
    std::ifstream in(endpoint_file);
    std::string word;
    while (in >> word) {
      if (word != "ready") words_.push_back(word);
    }
    if (!words_.empty()) return;
    // Reads the child's pipes a moment (so it never blocks on a full one) and sees whether it died.
    if (!child_->read_until([](const std::string&) { return false; }, Clock::now() + 20ms) &&
        ::kill(child_->pid(), 0) != 0) {
      break;
    }
    if (Clock::now() > deadline) break;
  }
  const auto [status, when] = child_->wait(Clock::now() + 5s);
  throw std::runtime_error("tests/servers/" + script + " did not come up (" + status.describe() +
                           "; scripts/install-deps.sh installs what it needs): " + child_->err());
}

TestServer::~TestServer() = default;  // the Child kills it; the servers take down what they started

HttpServer::HttpServer(const std::string& root, const std::string& state)
    : server("http_server.py", {"--root", root, "--state", state}, state + "/endpoint") {
  const auto& words = server.endpoint();
  if (words.size() < 3) throw std::runtime_error("http_server.py wrote an endpoint without http, https and cert");
  http = words[0];
  https = words[1];
  certificate = words[2];
}

FaultProxy::FaultProxy(const std::string& upstream, const std::string& state)
    : log(state + "/requests.jsonl"),
      server("fault_proxy.py", {"--upstream", upstream, "--state", state, "--log", state + "/requests.jsonl"},
             state + "/endpoint") {
  url = server.endpoint().at(0);
}

std::vector<std::string> FaultProxy::lines(const std::string& log, const std::string& part, size_t expected) {
  const auto read = [&] {
    std::ifstream in(log);
    std::vector<std::string> found;
    for (std::string line; std::getline(in, line);) {
      if (line.find(part) != std::string::npos) found.push_back(line);
    }
    return found;
  };
  const auto deadline = Clock::now() + 10s;
  while (read().size() < expected && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(50ms);
  return read();
}

S3Server::S3Server(const std::string& state) : server("s3_server.py", {"--dir", state}, state + "/endpoint") {
  endpoint = server.endpoint().at(0);
}

namespace {

void curl_s3(const std::vector<std::string>& extra, const std::string& what) {
  std::vector<std::string> argv{"/usr/bin/curl",
                                "-sS",
                                "--fail-with-body",
                                "--aws-sigv4",
                                "aws:amz:us-east-1:s3",
                                "--user",
                                std::string(S3Server::kAccessKey) + ":" + S3Server::kSecretKey,
                                "-H",
                                "x-amz-content-sha256: UNSIGNED-PAYLOAD"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const Result result = run_program(argv, 120s);
  if (!result.status.is(0)) {
    throw std::runtime_error(what + " failed (" + result.status.describe() + "): " + result.out + result.err);
  }
}

}  // namespace

void S3Server::make_bucket(const std::string& bucket) const {
  curl_s3({"-X", "PUT", endpoint + "/" + bucket}, "making bucket " + bucket);
}

void S3Server::put(const std::string& bucket, const std::string& key, const std::string& file) const {
  curl_s3({"-T", file, endpoint + "/" + bucket + "/" + key}, "uploading " + file);
}

}  // namespace ferry::testing
