#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

// What a config's checks say about a dataset's path (source.prefix, source.shards, source.root) that
// cannot be read: where it was looked for, and what to do. Internal: not installed.

namespace ferry::detail {

/// Whether `path` is fetched rather than opened: an http://, https:// or s3:// URL, or `pipe:COMMAND`.
bool is_fetched_path(std::string_view path);

/// Why `path` is not a path ferry can read: a URL of another scheme (gs://, hdfs://), a fetched one
/// (is_fetched_path) where `fetched_ok` is false (an image folder, which must be listed), or a glob
/// ('*', '?', '['); nullopt for a local path or, with `fetched_ok`, a fetched one.
std::optional<std::string> unsupported_path(std::string_view path, bool fetched_ok = true);

/// `path` as it is looked for: relative paths are relative to the current folder (not the config's).
std::string absolute_path(const std::string& path);

/// "no such file: /abs/data/x.idx" and, for a relative path, "(data/x.idx from the current folder)".
std::string missing_text(const std::string& path, std::string_view what = "file");

/// The command that writes a small dataset of `kind` (tokens, tar, images) at `where`, as advice
/// after a missing dataset: "; `ferry make-dataset tokens data/tokens` writes a small one there".
std::string make_dataset_hint(std::string_view kind, const std::string& where);

/// make_dataset_hint() for missing tar `shards`, only where they are the names `ferry make-dataset tar`
/// writes (DIR/shard-000000.tar, DIR/shard-000001.tar, ... in one folder other than the current one),
/// with --shards when there are not 4; "" otherwise, as the command could not make them.
std::string tar_dataset_hint(const std::vector<std::string>& shards);

/// The file or folder `path` names, as an absolute path without links (realpath), or `path` itself
/// when it cannot be resolved: two spellings of one dataset record the same order.
std::string real_path(const std::string& path);

}  // namespace ferry::detail
