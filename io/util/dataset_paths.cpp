#include "ferry/io/util/dataset_paths.h"

#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include <unistd.h>

namespace ferry::detail {

bool is_fetched_path(std::string_view path) {
  return path.starts_with("http://") || path.starts_with("https://") || path.starts_with("s3://") ||
         path.starts_with("pipe:");
}

std::optional<std::string> unsupported_path(std::string_view path, bool fetched_ok) {
  if (is_fetched_path(path)) {
    if (fetched_ok) return std::nullopt;
    std::string why(1, '\'');  // built by appending: g++ 12 warns (-Wrestrict) on "'" + std::string
    why.append(path.substr(0, path.find(':')));
    why.append(
        ":' is not read here: this is read from a local (or mounted) folder, since a URL or a command "
        "lists no files; pack the data into tar shards (ferry make-dataset tar) and read those over HTTP, S3 "
        "or pipe:");
    return why;
  }
  // A URL: a scheme of letters, digits, '+', '-' or '.', then "://".
  const size_t scheme_end = path.find("://");
  if (scheme_end != std::string_view::npos && scheme_end > 0 && std::isalpha(static_cast<unsigned char>(path[0]))) {
    bool scheme = true;
    for (const char c : path.substr(0, scheme_end)) {
      scheme = scheme && (std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.');
    }
    if (scheme) {
      std::string why(1, '\'');  // built by appending: g++ 12 warns (-Wrestrict) on "'" + std::string
      why.append(path.substr(0, scheme_end));
      why.append(
          "://' is not supported: ferry reads local files, http://, https:// and s3:// URLs, and "
          "pipe:COMMAND (e.g. pipe:gsutil cat gs://bucket/shard.tar)");
      return why;
    }
  }
  if (path.find_first_of("*?[") != std::string_view::npos) {
    return "globs ('*', '?', '[...]') are not supported yet: list the files, or give a numbered range such as "
           "shard-{000000..000099}.tar";
  }
  return std::nullopt;
}

std::string absolute_path(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return path;
  std::string folder(cwd);
  std::string_view rest(path);
  while (rest.rfind("./", 0) == 0) rest.remove_prefix(2);
  return folder + (folder.back() == '/' ? "" : "/") + std::string(rest);
}

std::string missing_text(const std::string& path, std::string_view what) {
  const std::string absolute = absolute_path(path);
  std::string text = "no such " + std::string(what) + ": " + absolute;
  if (absolute != path) text += " (" + path + " from the current folder; relative paths are not the config's)";
  return text;
}

std::string make_dataset_hint(std::string_view kind, const std::string& where) {
  return "; `ferry make-dataset " + std::string(kind) + " " + where + "` writes a small one there to try ferry on";
}

std::string tar_dataset_hint(const std::vector<std::string>& shards) {
  constexpr size_t kMadeShards = 4;      // make-dataset tar's --shards default
  constexpr size_t kMadeSamples = 1000;  // and its --samples default, at least one a shard
  if (shards.empty()) return "";
  const size_t slash = shards[0].rfind('/');
  if (slash == std::string::npos || slash == 0) return "";  // the current folder or /: not empty
  const std::string folder = shards[0].substr(0, slash);
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "/shard-%06zu.tar", i);
    if (shards[i] != folder + name) return "";
  }
  std::string where = folder;
  if (shards.size() != kMadeShards) where += " --shards " + std::to_string(shards.size());
  if (shards.size() > kMadeSamples) where += " --samples " + std::to_string(shards.size());
  return make_dataset_hint("tar", where);
}

std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
}

}  // namespace ferry::detail
