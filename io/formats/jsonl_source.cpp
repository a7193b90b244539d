#include "ferry/io/formats/jsonl_source.h"

#include <algorithm>
#include <cstring>

#include <ATen/ops/empty.h>
#include <simdjson.h>

#include "ferry/io/remote/data_store.h"
#include "ferry/io/util/mapped_file.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

constexpr size_t kKeptLineBytes = size_t{1} << 20;

bool blank(const char* begin, const char* end) {
  return std::all_of(begin, end, [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

at::Tensor bytes_of(std::string_view text) {
  at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::TensorOptions().dtype(at::kByte));
  if (!text.empty()) std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  return bytes;
}

}  // namespace

JsonlSource::JsonlSource(JsonlOptions options) : options_(std::move(options)) {
  if (options_.files.empty()) throw Error("jsonl source: no files");
  if (options_.fields.empty()) throw Error("jsonl source: no fields");
  for (const JsonlField& field : options_.fields) {
    fields_.push_back(FieldSpec{.name = field.name,
                                .dtype = field.dtype,
                                .shape = field.shape,
                                .max_length = field.max_length,
                                .decoder = field.decoder});
  }
  for (const std::string& path : options_.files) {
    File file;
    file.path = path;
    if (is_plain_local_file(path)) {
      // Read ahead: the first thing done with the mapping is the scan for lines, start to end.
      file.data = detail::map_file(path, "jsonl source", detail::MappedAccess::kSequential, file.bytes);
    } else {
      // Remote, compressed or piped: fetched (decoded) through the cache, then held in memory.
      fetched_ = true;
      file.data =
          read_whole(*DataStore::get(options_.remote)->open(path, DataStore::Access::kWhole, "jsonl file"), file.bytes);
    }
    file.first = size_;
    const char* data = reinterpret_cast<const char*>(file.data.get());
    const char* end = data + file.bytes;
    uint64_t blanks = 0;
    for (const char* line = data; line < end;) {
      const auto* newline = static_cast<const char*>(std::memchr(line, '\n', static_cast<size_t>(end - line)));
      const char* line_end = newline != nullptr ? newline : end;
      // Blank lines (a trailing one, say) are no samples; keys still give the file's line numbers.
      if (*line != '{' && blank(line, line_end)) {
        ++blanks;
        if (file.blanks.empty() || file.blanks.back().first != file.starts.size()) {
          file.blanks.emplace_back(file.starts.size(), blanks);
        } else {
          file.blanks.back().second = blanks;
        }
      } else {
        file.starts.push_back(static_cast<uint64_t>(line - data));
      }
      if (newline == nullptr) break;
      line = newline + 1;
    }
    size_ += file.starts.size();
    files_.push_back(std::move(file));
  }
  if (size_ == 0) {
    std::string files;
    for (const std::string& path : options_.files) files += (files.empty() ? "" : ", ") + path;
    throw Error("jsonl source: no lines in " + files);
  }
}

const JsonlSource::File& JsonlSource::file_of(uint64_t index) const {
  if (index >= size_) {
    throw Error("jsonl source: sample " + std::to_string(index) + " is past the last (" + std::to_string(size_) +
                " lines)");
  }
  const auto after = std::upper_bound(files_.begin(), files_.end(), index,
                                      [](uint64_t wanted, const File& file) { return wanted < file.first; });
  return *(after - 1);
}

std::string JsonlSource::key(uint64_t index) const {
  const File& file = file_of(index);
  const uint64_t local = index - file.first;
  // The blank lines before it: those counted at the last sample at or before this one.
  uint64_t blanks = 0;
  const auto after = std::upper_bound(file.blanks.begin(), file.blanks.end(), local,
                                      [](uint64_t wanted, const auto& gap) { return wanted < gap.first; });
  if (after != file.blanks.begin()) blanks = (after - 1)->second;
  return file.path + ":" + std::to_string(local + blanks + 1);
}

EncodedSample JsonlSource::read(uint64_t index) const {
  const File& file = file_of(index);
  const char* data = reinterpret_cast<const char*>(file.data.get());
  const uint64_t start = file.starts[index - file.first];
  const auto* newline = static_cast<const char*>(std::memchr(data + start, '\n', file.bytes - start));
  size_t length = (newline != nullptr ? static_cast<size_t>(newline - data) : file.bytes) - start;
  if (length > 0 && data[start + length - 1] == '\r') --length;

  // simdjson reads up to SIMDJSON_PADDING bytes past the text: the line is copied into a buffer with
  // room for them (the mapping may end right after it).
  thread_local simdjson::ondemand::parser parser;
  thread_local std::string buffer;
  buffer.assign(data + start, length);
  buffer.resize(length + simdjson::SIMDJSON_PADDING);
  EncodedSample sample;
  sample.index = index;
  sample.key = key(index);
  auto failed = [&](const std::string& what) { return Error(sample.key + ": " + what); };

  simdjson::ondemand::document document;
  simdjson::ondemand::object object;
  if (auto error = parser.iterate(buffer.data(), length, buffer.size()).get(document)) {
    throw failed(std::string("not JSON (") + simdjson::error_message(error) + ")");
  }
  if (auto error = document.get_object().get(object)) {
    throw failed(std::string("a line must be a JSON object (") + simdjson::error_message(error) + ")");
  }
  sample.fields.reserve(options_.fields.size());
  for (const JsonlField& field : options_.fields) {
    // Fields of one member share its bytes: simdjson unescapes a string into a buffer the size of the
    // line, so a second get_string() of the same member could run past it.
    const auto same = std::find_if(options_.fields.begin(), options_.fields.end(),
                                   [&](const JsonlField& other) { return other.key == field.key; });
    if (same != options_.fields.begin() + static_cast<std::ptrdiff_t>(sample.fields.size())) {
      sample.fields.push_back(sample.fields[static_cast<size_t>(same - options_.fields.begin())]);
      continue;
    }
    simdjson::ondemand::value value;
    if (auto error = object.find_field_unordered(field.key).get(value)) {
      if (error == simdjson::NO_SUCH_FIELD) throw failed("no member '" + field.key + "' (field '" + field.name + "')");
      throw failed("member '" + field.key + "': " + simdjson::error_message(error));
    }
    simdjson::ondemand::json_type type{};
    std::string_view text;
    simdjson::error_code error = value.type().get(type);
    if (!error) {
      simdjson::ondemand::array array;
      simdjson::ondemand::object inner;
      switch (type) {
        case simdjson::ondemand::json_type::string: error = value.get_string().get(text); break;
        case simdjson::ondemand::json_type::array:
          error = value.get_array().get(array);
          if (!error) error = array.raw_json().get(text);
          break;
        case simdjson::ondemand::json_type::object:
          error = value.get_object().get(inner);
          if (!error) error = inner.raw_json().get(text);
          break;
        default: text = value.raw_json_token(); break;
      }
    }
    if (error) throw failed("member '" + field.key + "': " + simdjson::error_message(error));
    if (type != simdjson::ondemand::json_type::string) {
      while (!text.empty() && std::strchr(" \t\r\n", text.back()) != nullptr) text.remove_suffix(1);
    }
    sample.fields.push_back(bytes_of(text));
  }
  // ondemand reads only the members asked for: the line must still be one whole object, with nothing
  // after it ({"a": 1}{"a": 2} or a line cut short are errors, not a sample).
  document.rewind();
  std::string_view whole;
  simdjson::error_code error = document.get_object().get(object);
  if (!error) error = object.raw_json().get(whole);
  if (error) throw failed(std::string("not one JSON object (") + simdjson::error_message(error) + ")");
  if (!blank(whole.data() + whole.size(), buffer.data() + length)) {
    throw failed("text after the object, at byte " + std::to_string(whole.data() + whole.size() - buffer.data()));
  }
  // A parser keeps room for the longest line it saw: after a very long one, a thread gives it back.
  if (buffer.capacity() > kKeptLineBytes) {
    buffer = std::string();
    parser = simdjson::ondemand::parser();
  }
  return sample;
}

std::string JsonlSource::describe() const {
  std::string fields;
  for (const JsonlField& field : options_.fields) fields += (fields.empty() ? "" : ", ") + field.name;
  return "jsonl(" + std::to_string(files_.size()) + (files_.size() == 1 ? " file, " : " files, ") +
         std::to_string(size_) + " lines, fields=" + fields + ")";
}

std::optional<RemoteDataStats> JsonlSource::remote_data() const {
  if (!fetched_) return std::nullopt;
  return DataStore::get(options_.remote)->stats();
}

}  // namespace ferry
