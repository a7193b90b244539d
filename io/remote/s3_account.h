#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ferry/io/util/remote_options.h"

// Where S3 requests go and who signs them, found as the AWS tools find it. Internal: not installed.

namespace ferry {

/// The account S3 URLs are read with: the endpoint, the region, and the credentials, each resolved the way
/// the AWS CLI and SDKs resolve it, with where it came from for messages.
///
///   credentials  RemoteOptions::anonymous: none; else AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
///                (+ AWS_SESSION_TOKEN); else the profile in the shared credentials file
///                (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials), then in the config file
///                (AWS_CONFIG_FILE, ~/.aws/config); else none: requests go unsigned (public buckets).
///   profile      RemoteOptions::profile, AWS_PROFILE, "default"; one named but in neither file is an error.
///   region       RemoteOptions::region, AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, us-east-1.
///   endpoint     RemoteOptions::endpoint_url, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
///                `endpoint_url` (its `s3` section's first); none: AWS's own.
///
/// Immutable once made; thread-safe.
struct S3Account {
  struct Credentials {
    std::string access_key;
    std::string secret_key;
    std::string session_token;  // "" : none
    std::string source;         // "environment variables", "profile 'x' in /home/u/.aws/credentials"
  };
  std::string region;
  std::string endpoint;  // "" : AWS (https://BUCKET.s3.REGION.amazonaws.com)
  std::optional<Credentials> credentials;
  std::string profile;

  /// Resolves it from `options` and the process's environment and files. Throws ferry::Error for a
  /// profile named but not found, half a key pair, or an endpoint that is not an http(s) URL.
  static S3Account resolve(const RemoteOptions& options);

  /// The HTTP(S) URL of s3://BUCKET/KEY: ENDPOINT/BUCKET/KEY (path style) for an endpoint, else AWS's
  /// virtual-hosted address (path style for a bucket name with a dot, which a wildcard certificate
  /// does not cover). The key's bytes are percent-encoded as SigV4 canonicalises them, '/' kept.
  /// Throws ferry::Error for a URL without a bucket or a key.
  std::string http_url(std::string_view s3_url) const;
  /// One line for messages: "region us-east-1, endpoint http://..., credentials from ..." .
  std::string describe() const;
};

}  // namespace ferry
