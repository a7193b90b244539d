#pragma once

#include <chrono>
#include <cstdint>
#include <string>

// How ferry reaches data that is not on a local disk, and where it keeps it. Internal: not installed.

namespace ferry {

/// The settings of a config's `remote` mapping: the connection, S3's account, and the local cache that
/// shards fetched from object storage (and compressed or piped shards, decoded) are kept in.
struct RemoteOptions {
  /// Where fetched and decoded shards are kept; "" : $XDG_CACHE_HOME/ferry (~/.cache/ferry). Ranks of one
  /// machine that name the same folder share it: each shard is fetched once.
  std::string cache_dir;
  /// The most bytes the cache holds; 0: half the free space of its file system when the run starts.
  uint64_t max_bytes = 0;
  /// Shards (or blocks of a large file) fetched ahead of the reading, in the order they will be read.
  size_t prefetch = 8;
  /// Transfers at once, the prefetch's and the readers'.
  size_t connections = 8;
  /// A large file that is read at random (a Megatron .bin) is fetched and cached in blocks of this many bytes.
  uint64_t block_bytes = uint64_t{64} << 20;
  /// Attempts after the first for a transfer that fails on the way (a 5xx, a reset, a cut body, a stall),
  /// with backoff; then an error.
  int retries = 5;
  /// The first wait before a retry; it doubles each time (with jitter), to at most 8 s.
  std::chrono::milliseconds backoff{200};
  /// A transfer that receives nothing for this long is given up (and retried).
  std::chrono::milliseconds timeout{30'000};
  std::chrono::milliseconds connect_timeout{10'000};
  /// A PEM file of the certificate authorities that HTTPS servers are checked against ("" : the system's).
  std::string ca_bundle;
  /// S3: the store's address for an S3-compatible one ("http://127.0.0.1:9000"); "" : AWS_ENDPOINT_URL_S3,
  /// AWS_ENDPOINT_URL, the profile's endpoint_url, then AWS itself. Such an address is used path-style
  /// (ENDPOINT/bucket/key).
  std::string endpoint_url;
  /// S3: the region requests are signed for; "" : AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1.
  std::string region;
  /// S3: the profile of the shared credentials and config files; "" : AWS_PROFILE, then "default".
  std::string profile;
  /// S3: send requests unsigned (public buckets), whatever credentials there are.
  bool anonymous = false;
};

}  // namespace ferry
