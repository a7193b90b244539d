#include "ferry/io/remote/s3_account.h"

#include <cstdlib>
#include <fstream>
#include <map>

#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

std::string trimmed(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) return "";
  const size_t end = text.find_last_not_of(" \t\r");
  return std::string(text.substr(begin, end - begin + 1));
}

std::string home_file(const char* variable, const char* under_home) {
  if (std::string path = env(variable); !path.empty()) return path;
  const std::string home = env("HOME");
  return home.empty() ? std::string() : home + "/" + under_home;
}

// The AWS files' INI dialect: "[section]", "key = value", '#' and ';' comments, and a key with an empty
// value opening indented sub-keys ("s3 =\n  endpoint_url = ..."), kept as "s3.endpoint_url".
using Sections = std::map<std::string, std::map<std::string, std::string>>;

Sections read_ini(const std::string& path) {
  Sections sections;
  std::ifstream in(path);
  std::string line, section, parent;
  while (std::getline(in, line)) {
    const std::string text = trimmed(line);
    if (text.empty() || text[0] == '#' || text[0] == ';') continue;
    if (text.front() == '[' && text.back() == ']') {
      section = trimmed(std::string_view(text).substr(1, text.size() - 2));
      sections[section];
      parent.clear();
      continue;
    }
    const size_t equals = text.find('=');
    if (equals == std::string::npos || section.empty()) continue;
    const std::string key = trimmed(std::string_view(text).substr(0, equals));
    const std::string value = trimmed(std::string_view(text).substr(equals + 1));
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    if (indented && !parent.empty()) {
      sections[section][parent + "." + key] = value;
      continue;
    }
    parent = value.empty() ? key : std::string();
    sections[section][key] = value;
  }
  return sections;
}

// Percent-encodes everything but SigV4's unreserved characters and '/'.
std::string uri_encoded(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte >= 'A' && byte <= 'Z') || (byte >= 'a' && byte <= 'z') || (byte >= '0' && byte <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~' || c == '/') {
      out += c;
    } else {
      out += '%';
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    }
  }
  return out;
}

}  // namespace

S3Account S3Account::resolve(const RemoteOptions& options) {
  S3Account account;
  const std::string named = !options.profile.empty() ? options.profile : env("AWS_PROFILE");
  account.profile = named.empty() ? "default" : named;
  const std::string credentials_file = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  const std::string config_file = home_file("AWS_CONFIG_FILE", ".aws/config");
  const Sections credentials = credentials_file.empty() ? Sections{} : read_ini(credentials_file);
  const Sections config = config_file.empty() ? Sections{} : read_ini(config_file);
  const auto in_credentials = credentials.find(account.profile);
  auto in_config = config.find(account.profile == "default" ? "default" : "profile " + account.profile);
  if (in_config == config.end() && account.profile == "default") in_config = config.find("profile default");
  if (!named.empty() && in_credentials == credentials.end() && in_config == config.end()) {
    throw Error("S3: profile '" + account.profile + "' (" +
                (options.profile.empty() ? "AWS_PROFILE" : "remote.profile") + ") is in neither " + credentials_file +
                " nor " + config_file);
  }
  const auto profile_value = [&](const std::string& key) {
    if (in_config == config.end()) return std::string();
    const auto found = in_config->second.find(key);
    return found == in_config->second.end() ? std::string() : found->second;
  };

  for (const std::string& region : {options.region, env("AWS_REGION"), env("AWS_DEFAULT_REGION"),
                                    profile_value("region"), std::string("us-east-1")}) {
    if (!region.empty()) {
      account.region = region;
      break;
    }
  }
  for (const std::string& endpoint : {options.endpoint_url, env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL"),
                                      profile_value("s3.endpoint_url"), profile_value("endpoint_url")}) {
    if (!endpoint.empty()) {
      account.endpoint = endpoint;
      break;
    }
  }
  while (!account.endpoint.empty() && account.endpoint.back() == '/') account.endpoint.pop_back();
  if (!account.endpoint.empty() && !account.endpoint.starts_with("http://") &&
      !account.endpoint.starts_with("https://")) {
    throw Error("S3: the endpoint '" + account.endpoint + "' is not an http:// or https:// URL");
  }

  if (options.anonymous) return account;
  const auto pair = [&](std::string key, std::string secret, std::string token, std::string source) {
    if (key.empty() != secret.empty()) {
      throw Error("S3: " + source + " give" +
                  (key.empty() ? "s a secret key but no access key" : "s an access key but no secret key") +
                  " (both are needed, or neither for unsigned requests)");
    }
    if (!key.empty()) account.credentials = Credentials{std::move(key), std::move(secret), std::move(token), source};
    return !key.empty();
  };
  if (pair(env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"), env("AWS_SESSION_TOKEN"),
           "the environment variables AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")) {
    return account;
  }
  for (const auto& [sections, file, found] :
       {std::tuple{&credentials, credentials_file, in_credentials}, std::tuple{&config, config_file, in_config}}) {
    if (found == sections->end()) continue;
    const auto value = [&found](const char* key) {
      const auto it = found->second.find(key);
      return it == found->second.end() ? std::string() : it->second;
    };
    if (pair(value("aws_access_key_id"), value("aws_secret_access_key"), value("aws_session_token"),
             "profile '" + account.profile + "' in " + file)) {
      return account;
    }
  }
  return account;
}

std::string S3Account::http_url(std::string_view s3_url) const {
  std::string_view rest = s3_url.substr(s3_url.find("://") + 3);
  const size_t slash = rest.find('/');
  if (slash == 0 || slash == std::string_view::npos || slash + 1 == rest.size()) {
    throw Error("'" + std::string(s3_url) + "' is not an S3 object: write s3://BUCKET/KEY");
  }
  const std::string bucket(rest.substr(0, slash));
  const std::string key = uri_encoded(rest.substr(slash + 1));
  if (!endpoint.empty()) return endpoint + "/" + bucket + "/" + key;
  if (bucket.find('.') != std::string::npos) return "https://s3." + region + ".amazonaws.com/" + bucket + "/" + key;
  return "https://" + bucket + ".s3." + region + ".amazonaws.com/" + key;
}

std::string S3Account::describe() const {
  return "region " + region + ", endpoint " + (endpoint.empty() ? "AWS" : endpoint) + ", " +
         (credentials ? "credentials from " + credentials->source : "unsigned requests (no credentials found)");
}

}  // namespace ferry
