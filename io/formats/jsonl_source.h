#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ferry/io/formats/source.h"
#include "ferry/io/util/remote_options.h"

namespace ferry {

/// One field of a JSON-lines sample: the value of `key` in each line's object.
struct JsonlField {
  std::string name;
  std::string key;  // the member of each line's object
  at::ScalarType dtype = at::kByte;
  std::vector<int64_t> shape = {kVariableLength};
  std::optional<int64_t> max_length;
  std::string decoder = "raw";
};

/// What a JsonlSource reads: the files, in order, and the fields.
struct JsonlOptions {
  /// Local paths (plain ones are mapped), http://, https:// or s3:// URLs or `pipe:COMMAND`, and gzip,
  /// zstd or xz files: those are fetched and decoded through the cache, then held in memory.
  std::vector<std::string> files;
  std::vector<JsonlField> fields;
  RemoteOptions remote;
};

/// JSON lines (https://jsonlines.org): each line of each file is one sample, a JSON object; a field is
/// the value of one of its members. A string gives its UTF-8 bytes (escapes resolved), as the raw or
/// sentencepiece decoders take them; any other value gives its JSON text, as the json decoder takes it.
///
/// The files are mapped and their lines found once, when the source is made (a memchr pass, about as
/// fast as the disk reads); a line is parsed (simdjson) only when its sample is read. A sample's key
/// is "<file>:<line>"; a line that is not an object, or lacks a member, is an error naming both.
/// Thread-safe: read() parses with a parser per thread.
class JsonlSource : public Source {
 public:
  /// Throws ferry::Error for a file that cannot be mapped, no files, or no fields.
  explicit JsonlSource(JsonlOptions options);

  const std::vector<FieldSpec>& fields() const override { return fields_; }
  uint64_t size() const override { return size_; }
  EncodedSample read(uint64_t index) const override;
  /// What fetching its remote, compressed or piped files did; nullopt where all are local plain files.
  std::optional<RemoteDataStats> remote_data() const override;
  std::string describe() const override;
  std::string key(uint64_t index) const override;

 private:
  struct File {
    std::string path;
    std::shared_ptr<const std::byte> data;
    size_t bytes = 0;
    std::vector<uint64_t> starts;  // each sample's line's first byte
    /// (sample, blank lines before it) at each sample after blank lines: the line numbers of keys.
    std::vector<std::pair<uint64_t, uint64_t>> blanks;
    uint64_t first = 0;  // the index of its first sample among all files' samples
  };
  const File& file_of(uint64_t index) const;

  JsonlOptions options_;
  std::vector<FieldSpec> fields_;
  std::vector<File> files_;
  uint64_t size_ = 0;
  bool fetched_ = false;  // some file came through the cache
};

}  // namespace ferry
