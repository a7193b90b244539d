#include "ferry/io/remote/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <random>
#include <thread>

#include "ferry/io/util/printable.h"
#include "ferry/pipeline/error.h"

namespace ferry {

// Note [remote transfers]
//
// Every read of a remote object is one GET of a byte range, streamed to a sink that must see each byte
// of the range once, in order. A transfer that fails on the way is retried only for what is still
// missing: the next request asks for the range from the first byte not yet delivered, so a cut body,
// a reset connection or a stall costs what was lost, not the whole range. A server that ignores Range
// (answers 200 with the whole object) is read past the bytes already delivered.
//
// Failures are told apart by what retrying can change. 5xx, 429 (S3's "SlowDown" is a 503), 408, a
// refused or reset connection, a body shorter than its Content-Length and a stall (no byte for
// remote.timeout) may pass: they are retried, after a backoff that doubles from remote.backoff (with
// jitter, at most 8 s), up to remote.retries times. 4xx answers, a certificate that does not verify
// and a host name that does not resolve will not: they fail at once, and the message says which and
// what to do. An object whose ETag (or, without one, size) differs from the one it was indexed with
// has changed under the index: its offsets are wrong, so that is an error too, never retried.
//
// Connections are reused: curl handles live in a pool and keep their connections, so a thread's next
// request to the same server skips the TCP and TLS handshakes.

namespace {

constexpr size_t kMaxErrorBody = 4096;
constexpr long kBufferBytes = 256 * 1024;
constexpr std::chrono::milliseconds kMaxBackoff{8000};

void global_init() {
  static const CURLcode code = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (code != CURLE_OK) throw Error(std::string("libcurl failed to start: ") + curl_easy_strerror(code));
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

std::string trimmed(std::string_view text) {
  while (!text.empty() && (text.back() == '\r' || text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  return std::string(text);
}

// "<Code>NoSuchKey</Code>" -> "NoSuchKey" (S3's XML errors), "" when absent.
std::string xml_value(const std::string& body, std::string_view tag) {
  std::string open(1, '<');  // built by appending: g++ 12 warns (-Wrestrict) on "<" + std::string
  open.append(tag);
  open += '>';
  const size_t begin = body.find(open);
  if (begin == std::string::npos) return "";
  const size_t end = body.find("</", begin + open.size());
  return end == std::string::npos ? "" : body.substr(begin + open.size(), end - begin - open.size());
}

std::string range_text(uint64_t offset, std::optional<uint64_t> size) {
  if (!size) return offset == 0 ? "" : "bytes " + std::to_string(offset) + "-";
  return "bytes " + std::to_string(offset) + "-" + std::to_string(offset + *size - 1);
}

}  // namespace

bool is_remote_url(std::string_view path) {
  return path.starts_with("http://") || path.starts_with("https://") || path.starts_with("s3://");
}

struct HttpClient::Handle {
  CURL* curl = nullptr;
  Handle() : curl(curl_easy_init()) {
    if (curl == nullptr) throw Error("libcurl could not make a handle");
  }
  ~Handle() { curl_easy_cleanup(curl); }
};

// A handle from the pool for one request, put back after it.
class HttpClient::HandleLease {
 public:
  explicit HandleLease(const HttpClient& client) : client_(client) {
    std::lock_guard lock(client_.pool_mutex_);
    if (!client_.pool_.empty()) {
      handle_ = std::move(client_.pool_.back());
      client_.pool_.pop_back();
    }
    if (!handle_) handle_ = std::make_unique<Handle>();
  }
  ~HandleLease() {
    std::lock_guard lock(client_.pool_mutex_);
    client_.pool_.push_back(std::move(handle_));
  }
  Handle& operator*() const { return *handle_; }

 private:
  const HttpClient& client_;
  std::unique_ptr<Handle> handle_;
};

namespace {

// What one request did.
struct Attempt {
  long status = 0;
  CURLcode code = CURLE_OK;
  char curl_error[CURL_ERROR_SIZE] = {};
  std::string body;  // an error answer's body, its first kMaxErrorBody bytes
  std::string etag;
  std::optional<uint64_t> range_start;  // Content-Range: bytes START-END/TOTAL
  std::optional<uint64_t> total;        // the object's size, from Content-Range or a 200's Content-Length
  bool ranged = false;                  // the answer had a Content-Range
  uint64_t delivered = 0;               // bytes this request gave the sink
  bool retryable = false;
  bool complete = false;  // the range's bytes are all delivered (the rest of the body is not wanted)
  bool changed = false;   // the object is not the one expected
  std::string what;       // why it failed
  std::exception_ptr sink_error;

  // Transfer state for the callbacks.
  const HttpClient::Sink* sink = nullptr;
  const ObjectInfo* expect = nullptr;
  uint64_t start = 0;                 // the first byte asked for
  std::optional<uint64_t> remaining;  // bytes still wanted
  uint64_t skip = 0;                  // bytes to drop first (a server that ignored Range)
  bool checked = false;               // the answer's headers were checked
  CURL* curl = nullptr;
  const std::atomic<bool>* stop = nullptr;
  TransferCounters* counters = nullptr;
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto& a = *static_cast<Attempt*>(user);
  const std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) {  // a new answer (after a redirect or a 100 Continue): its own headers
    a.etag.clear();
    a.range_start.reset();
    a.total.reset();
    a.ranged = false;
    return line.size();
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return line.size();
  const std::string name = lower(line.substr(0, colon));
  const std::string value = trimmed(line.substr(colon + 1));
  const auto number = [](std::string_view text) -> std::optional<uint64_t> {
    uint64_t n = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
    return error == std::errc() && end == text.data() + text.size() ? std::optional(n) : std::nullopt;
  };
  if (name == "etag") {
    a.etag = value;
  } else if (name == "content-range" && value.starts_with("bytes ")) {
    const size_t dash = value.find('-'), slash = value.find('/');
    if (dash != std::string::npos) a.range_start = number(std::string_view(value).substr(6, dash - 6));
    // "bytes a-b/*": the size is not known; a Content-Length read before was the range's, not the object's.
    a.total = slash != std::string::npos ? number(std::string_view(value).substr(slash + 1)) : std::nullopt;
    a.ranged = true;
  } else if (name == "content-length" && !a.ranged) {
    a.total = number(value);  // the object's size in a 200; a 206's Content-Range says it instead
  }
  return line.size();
}

// Bytes of the body: an error answer's are kept for the message, a success's go to the sink.
size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto& a = *static_cast<Attempt*>(user);
  const size_t bytes = size * count;
  if (!a.checked) {
    curl_easy_getinfo(a.curl, CURLINFO_RESPONSE_CODE, &a.status);
    a.checked = true;
    if (a.status == 200 && a.start > 0) a.skip = a.start;  // Range ignored: the whole object comes
    if (a.status == 206 && a.range_start && *a.range_start != a.start) {
      a.what = "the server sent bytes from " + std::to_string(*a.range_start) + " when asked for bytes from " +
               std::to_string(a.start);
      return 0;
    }
    if (a.status >= 200 && a.status < 300 && a.expect != nullptr) {
      const std::optional<uint64_t> now = a.total;  // the object's size (a 206's Content-Range total)
      const bool etag_differs = !a.expect->etag.empty() && !a.etag.empty() && a.etag != a.expect->etag;
      const bool size_differs = now && *now != a.expect->size;
      if (etag_differs || size_differs) {
        a.what = "it changed since it was indexed (" +
                 (etag_differs ? "ETag " + a.expect->etag + ", now " + a.etag
                               : std::to_string(a.expect->size) + " bytes, now " + std::to_string(*now)) +
                 "): the offsets read from it no longer hold";
        a.changed = true;
        return 0;
      }
    }
  }
  if (a.status < 200 || a.status >= 300) {
    a.body.append(data, std::min(bytes, kMaxErrorBody - std::min(kMaxErrorBody, a.body.size())));
    return bytes;
  }
  const char* begin = data;
  size_t left = bytes;
  const size_t dropped = static_cast<size_t>(std::min<uint64_t>(a.skip, left));
  a.skip -= dropped;
  begin += dropped;
  left -= dropped;
  if (a.remaining) left = static_cast<size_t>(std::min<uint64_t>(left, *a.remaining));
  if (left > 0) {
    try {
      (*a.sink)(begin, left);
    } catch (...) {
      a.sink_error = std::current_exception();
      return 0;
    }
    a.delivered += left;
    a.counters->bytes.fetch_add(left, std::memory_order_relaxed);
    if (a.remaining) *a.remaining -= left;
  }
  if (a.remaining && *a.remaining == 0 && a.skip == 0) {
    a.complete = true;
    return dropped + left == bytes ? bytes : 0;  // more than the range came: stop reading it
  }
  return bytes;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto& a = *static_cast<const Attempt*>(user);
  return a.stop != nullptr && a.stop->load(std::memory_order_acquire) ? 1 : 0;
}

// One request with `curl`: a HEAD (sink null) or a GET of [offset, offset + size). Sets `a` (status, what
// failed, whether retrying can help) and returns whether it succeeded. `s3`: the account of an s3:// URL.
bool perform(CURL* curl, const RemoteOptions& options, const S3Account* s3, TransferCounters& counters,
             const std::string& url, bool head, uint64_t offset, std::optional<uint64_t> size,
             const HttpClient::Sink* sink, Attempt& a, const std::atomic<bool>* stop) {
  curl_easy_reset(curl);  // keeps the handle's connections, DNS and TLS session caches
  const std::string target = s3 != nullptr ? s3->http_url(url) : url;
  curl_easy_setopt(curl, CURLOPT_URL, target.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, a.curl_error);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, url.starts_with("s3://") ? 0L : 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                   static_cast<long>(std::max<int64_t>(1, (options.timeout.count() + 999) / 1000)));
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, kBufferBytes);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &a);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &a);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &a);
  if (!options.ca_bundle.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, options.ca_bundle.c_str());
  if (head) curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  const std::string range =
      size ? std::to_string(offset) + "-" + std::to_string(offset + *size - 1) : std::to_string(offset) + "-";
  if (!head && (offset > 0 || size)) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());

  curl_slist* headers = nullptr;
  std::string userpwd, sigv4;
  if (s3 != nullptr && s3->credentials) {
    sigv4 = "aws:amz:" + s3->region + ":s3";
    userpwd = s3->credentials->access_key + ":" + s3->credentials->secret_key;
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(curl, CURLOPT_USERPWD, userpwd.c_str());
    // S3 wants the payload's hash signed; these requests have none (libcurl 7.88 sends no such header).
    headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!s3->credentials->session_token.empty()) {
      headers = curl_slist_append(headers, ("x-amz-security-token: " + s3->credentials->session_token).c_str());
    }
  }
  if (headers != nullptr) curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

  a.curl = curl;
  a.sink = sink;
  a.start = offset;
  a.remaining = size;
  a.stop = stop;
  a.counters = &counters;
  counters.requests.fetch_add(1, std::memory_order_relaxed);
  a.code = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  if (a.sink_error) std::rethrow_exception(a.sink_error);
  if (stop != nullptr && stop->load(std::memory_order_acquire))
    throw Error((head ? "HEAD " : "GET ") + url + ": stopped");
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &a.status);

  if (!a.what.empty()) return false;  // the body callback refused the answer (changed, wrong range)
  const std::string curl_text = a.curl_error[0] != '\0' ? a.curl_error : curl_easy_strerror(a.code);
  if (a.status >= 400) {
    const std::string code = xml_value(a.body, "Code");
    const std::string message = xml_value(a.body, "Message");
    a.what = std::to_string(a.status) + (code.empty() ? "" : " " + code) +
             (message.empty() ? "" : " (" + printable(message, 200) + ")");
    a.retryable = a.status >= 500 || a.status == 429 || a.status == 408;
    const std::string from =
        s3 != nullptr && s3->credentials ? "the credentials from " + s3->credentials->source : "unsigned requests";
    if (code == "NoSuchBucket") {
      a.what += ": the bucket does not exist";
    } else if (a.status == 404) {
      a.what += ": no such object";
    } else if (code == "SignatureDoesNotMatch") {
      a.what += ": the secret key does not match the access key (" + from + "); check it";
    } else if (code == "InvalidAccessKeyId") {
      a.what += ": the server does not know the access key (" + from + "); check it";
    } else if (a.status == 403 || a.status == 401) {
      a.what += ": access denied to " + from +
                (s3 != nullptr && !s3->credentials
                     ? "; give credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile)"
                     : "");
    } else if (code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed") {
      a.what += ": the bucket may be in another region than " + (s3 != nullptr ? s3->region : std::string("its")) +
                "; set remote.region";
    } else if (a.status == 416) {
      a.what += ": the range is past the object's end";
    }
    return false;
  }
  if (a.complete || (a.code == CURLE_OK && a.status >= 200 && a.status < 300 && !a.remaining)) {
    if (head && a.status != 200) {
      a.what = "HEAD answered " + std::to_string(a.status);
      return false;
    }
    return true;
  }
  if (a.code == CURLE_OK && a.status >= 200 && a.status < 300) {
    a.what = "the body ended after " + std::to_string(a.delivered) + " of " +
             std::to_string(a.delivered + *a.remaining) + " bytes";
    a.retryable = true;
    return false;
  }
  if (a.status >= 300 && a.status < 400) {
    a.what = "redirected (" + std::to_string(a.status) + ") and not followed" +
             (s3 != nullptr ? ": the bucket may be in another region than " + s3->region + "; set remote.region"
                            : std::string());
    return false;
  }
  switch (a.code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      a.what = "DNS: " + curl_text + "; check the host name in the URL (and remote.endpoint_url) and the network";
      return false;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
      a.what = "TLS: the server's certificate could not be verified (" + curl_text +
               "); for a server signed by your own authority give its PEM file as remote.ca_bundle";
      return false;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT: a.what = curl_text; return false;
    case CURLE_OPERATION_TIMEDOUT:
      a.what = "stalled: " + curl_text + " (remote.timeout " + std::to_string(options.timeout.count()) + " ms)";
      a.retryable = true;
      return false;
    case CURLE_COULDNT_CONNECT:
      a.what = "cannot connect: " + curl_text + "; is the server up at that address?";
      a.retryable = true;
      return false;
    default:
      a.what = curl_text;
      a.retryable = true;  // resets, cut bodies, TLS handshakes cut short: the network's, not the request's
      return false;
  }
}

}  // namespace

HttpClient::HttpClient(RemoteOptions options) : options_(std::move(options)) { global_init(); }

HttpClient::~HttpClient() = default;

const S3Account* HttpClient::account_for(const std::string& url) const {
  if (!url.starts_with("s3://")) return nullptr;
  std::call_once(account_once_, [this] {
    try {
      account_ = S3Account::resolve(options_);
    } catch (...) {
      account_error_ = std::current_exception();
    }
  });
  if (account_error_) std::rethrow_exception(account_error_);
  return &*account_;
}

void HttpClient::back_off(int retry, const std::atomic<bool>* stop) const {
  thread_local std::minstd_rand random(std::random_device{}());
  auto wait = options_.backoff * (int64_t{1} << std::min(retry - 1, 20));
  wait = std::min<std::chrono::milliseconds>(wait, kMaxBackoff);
  wait = std::chrono::milliseconds(static_cast<int64_t>(wait.count() * (0.5 + (random() % 1000) / 1000.0)));
  const auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
    if (stop != nullptr && stop->load(std::memory_order_acquire)) return;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(20), until - std::chrono::steady_clock::now()));
  }
}

ObjectInfo HttpClient::stat(const std::string& url, const std::atomic<bool>* stop) const {
  HandleLease handle(*this);
  for (int tried = 0;; ++tried) {
    Attempt a;
    if (perform((*handle).curl, options_, account_for(url), counters_, url, true, 0, std::nullopt, nullptr, a, stop)) {
      curl_off_t length = -1;
      curl_easy_getinfo((*handle).curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
      if (length < 0) throw Error("HEAD " + url + ": the server gave no Content-Length: its size is unknown");
      return ObjectInfo{static_cast<uint64_t>(length), a.etag};
    }
    if (!a.retryable || tried >= options_.retries) {
      throw Error("HEAD " + url + ": " + a.what +
                  (a.retryable ? " (gave up after " + std::to_string(tried + 1) + " attempts)" : ""));
    }
    counters_.retries.fetch_add(1, std::memory_order_relaxed);
    back_off(tried + 1, stop);
  }
}

void HttpClient::fetch(const std::string& url, uint64_t offset, std::optional<uint64_t> size, const ObjectInfo* expect,
                       const Sink& sink, const std::atomic<bool>* stop, ObjectInfo* seen) const {
  if (size && *size == 0) return;
  HandleLease handle(*this);
  uint64_t delivered = 0;
  for (int tried = 0;; ++tried) {
    Attempt a;
    a.expect = expect;
    const std::optional<uint64_t> left = size ? std::optional(*size - delivered) : std::nullopt;
    const bool done = perform((*handle).curl, options_, account_for(url), counters_, url, false, offset + delivered,
                              left, &sink, a, stop);
    delivered += a.delivered;
    // A transfer that got further starts its count again: a long one over a flaky link is not given up
    // after `retries` cuts that each moved it on.
    if (a.delivered > 0 && !done) tried = 0;
    if (done) {
      if (seen != nullptr) *seen = ObjectInfo{a.total.value_or(offset + delivered), a.etag};
      return;
    }
    if (a.changed) throw ChangedObjectError("GET " + url + ": " + a.what);
    if (!a.retryable || tried >= options_.retries) {
      throw Error("GET " + url + (range_text(offset, size).empty() ? "" : " (" + range_text(offset, size) + ")") +
                  ": " + a.what +
                  (a.retryable ? " (gave up after " + std::to_string(tried + 1) + " attempts; remote.retries is " +
                                     std::to_string(options_.retries) + ")"
                               : ""));
    }
    counters_.retries.fetch_add(1, std::memory_order_relaxed);
    back_off(tried + 1, stop);
  }
}

}  // namespace ferry
