#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ferry/io/remote/s3_account.h"
#include "ferry/io/util/remote_options.h"
#include "ferry/pipeline/error.h"

// Reading objects over HTTP(S) and S3 with libcurl. Internal: not installed.

namespace ferry {

/// What a server says of an object: its size, and its ETag ("" where it gives none).
struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;
};

/// What the transfers did, summed over every thread. Relaxed atomics.
struct TransferCounters {
  std::atomic<uint64_t> bytes{0};     // body bytes received (retried ones too)
  std::atomic<uint64_t> requests{0};  // requests sent, retries included
  std::atomic<uint64_t> retries{0};   // requests that repeated a failed one
};

/// The object is not the one it was indexed as (its ETag or size differ): offsets read from it before
/// no longer hold.
class ChangedObjectError : public Error {
 public:
  using Error::Error;
};

/// Whether a URL is one HttpClient reads: http://, https:// or s3://.
bool is_remote_url(std::string_view path);

/// Reads objects named by http://, https:// and s3:// URLs (Note [remote transfers]).
///
/// In: RemoteOptions (timeouts, retries, the CA bundle, S3's account). stat() asks for an object's size
/// and ETag; fetch() streams a byte range of it to a sink, retrying what fails on the way (a 5xx, 429, a
/// reset or cut connection, a stall) up to options.retries times with backoff, each retry asking only for
/// what is still missing. What cannot succeed (404, 403, a changed object, TLS or DNS failures) fails at
/// once. Errors are ferry::Error naming the URL, what the server or the network said, and what to do.
///
/// Thread-safe: any number of threads call stat() and fetch() at once; each takes a curl handle from a
/// pool, which keeps its connections open for the next request to the same server (connection reuse).
/// Owns the handles (and their connections); S3's account is resolved on the first s3:// URL.
class HttpClient {
 public:
  explicit HttpClient(RemoteOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// Bytes of the body, in order, as they arrive: each byte of the asked range exactly once, whatever
  /// was retried. A sink that throws stops the transfer (its exception is rethrown).
  using Sink = std::function<void(const char* data, size_t size)>;

  /// The object's size and ETag (a HEAD request, retried as fetch() retries). Blocks. Throws
  /// ferry::Error as described above; "stopped" when `stop` turns true.
  ObjectInfo stat(const std::string& url, const std::atomic<bool>* stop = nullptr) const;
  /// Streams bytes [offset, offset + size) of the object (size nullopt: to its end) to `sink`. With
  /// `expect`, an object whose ETag (or, without one, size) differs is an error saying it changed
  /// since it was indexed. `seen`, when given, is set to the object's size and ETag as the server gave
  /// them. Blocks; returns when every byte went to the sink.
  void fetch(const std::string& url, uint64_t offset, std::optional<uint64_t> size, const ObjectInfo* expect,
             const Sink& sink, const std::atomic<bool>* stop = nullptr, ObjectInfo* seen = nullptr) const;

  const TransferCounters& counters() const noexcept { return counters_; }
  const RemoteOptions& options() const noexcept { return options_; }

 private:
  struct Handle;
  class HandleLease;

  /// S3's account, resolved on first use; null for a URL that is not s3://.
  const S3Account* account_for(const std::string& url) const;
  /// Sleeps the backoff before retry `retry` (1, 2, ...), watching `stop`.
  void back_off(int retry, const std::atomic<bool>* stop) const;

  RemoteOptions options_;
  mutable std::once_flag account_once_;
  mutable std::optional<S3Account> account_;
  mutable std::exception_ptr account_error_;
  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<Handle>> pool_;
  mutable TransferCounters counters_;
};

}  // namespace ferry
