// Source kind `csv`: records in a text file, one per line (a header line, blank lines and lines starting
// with '#' are skipped). Sample i is line i's text; its decoder turns it into numbers.
//
//   source: {kind: csv, path: data/records.csv, columns: 5, header: true}
#include <cstring>
#include <fstream>

#include <ATen/ops/empty.h>

#include "extensions.h"

namespace records {
namespace {

using Type = ferry::KeySpec::Type;

class CsvSource : public ferry::Source {
 public:
  // Reads the file once: the records' text stays in memory (fine for the small tables this is for).
  CsvSource(std::string path, int64_t columns, bool header, std::string decoder) : path_(std::move(path)) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw ferry::Error("csv source: cannot open '" + path_ + "'");
    std::string line;
    bool header_pending = header;
    for (size_t number = 1; std::getline(in, line); ++number) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || line.front() == '#') continue;
      if (header_pending) {
        header_pending = false;
        continue;
      }
      line_numbers_.push_back(number);
      lines_.push_back(std::move(line));
    }
    if (lines_.empty()) throw ferry::Error("csv source: '" + path_ + "' holds no records");
    // What the decoder makes of a line: `columns` float32 numbers.
    fields_.push_back(ferry::FieldSpec{"record", at::kFloat, {columns}, std::nullopt, std::move(decoder)});
  }

  const std::vector<ferry::FieldSpec>& fields() const override { return fields_; }
  uint64_t size() const override { return lines_.size(); }

  // Thread-safe: reads only what the constructor made. The key names the file and the line, so an error
  // in a record says where to look.
  ferry::EncodedSample read(uint64_t index) const override {
    if (index >= lines_.size())
      throw ferry::Error("csv source: record " + std::to_string(index) + " is beyond the end");
    const std::string& line = lines_[index];
    ferry::EncodedSample sample;
    sample.index = index;
    sample.key = path_ + ":" + std::to_string(line_numbers_[index]);
    at::Tensor bytes = at::empty({static_cast<int64_t>(line.size())}, at::kByte);
    std::memcpy(bytes.data_ptr(), line.data(), line.size());
    sample.fields.push_back(std::move(bytes));
    return sample;
  }

  std::string describe() const override {
    return "csv(" + path_ + ", " + std::to_string(lines_.size()) + " records, " +
           std::to_string(fields_.front().shape.front()) + " columns)";
  }

 private:
  std::string path_;
  std::vector<std::string> lines_;
  std::vector<size_t> line_numbers_;
  std::vector<ferry::FieldSpec> fields_;
};

}  // namespace

ferry::SourceKind csv_source_kind() {
  ferry::SourceKind kind;
  kind.name = "csv";
  kind.description =
      "Records in a text file, one per line (blank lines and lines starting with # are skipped). Each sample has one "
      "field, `record`: the line's numbers, made by the decoder named here.";
  kind.keys = {
      {.name = "path",
       .type = Type::kPath,
       .description = "The text file of records.",
       .default_value = "required",
       .required = true,
       .example = "data/records.csv",
       .min = 1},
      {.name = "columns",
       .type = Type::kInteger,
       .description = "Numbers per record.",
       .default_value = "required",
       .required = true,
       .example = "5",
       .min = 1,
       .max = 4096},
      {.name = "header",
       .type = Type::kBoolean,
       .description = "The first record line names the columns: skipped.",
       .default_value = "false",
       .example = "true"},
      {.name = "decoder",
       .type = Type::kDecoder,
       .description = "How a line becomes numbers; its keys (`separator`) sit beside it.",
       .default_value = "text_numbers",
       .example = "text_numbers"},
  };
  kind.make = [](const ferry::KeyValue& source) {
    return std::make_shared<CsvSource>(source.at("path").text(), source.at("columns").integer(),
                                       source.boolean_or("header", false), source.text_or("decoder", "text_numbers"));
  };
  kind.check = [](const ferry::KeyValue& source, ferry::KeyProblems& problems) {
    const ferry::KeyValue& path = source.at("path");
    if (!std::ifstream(path.text())) problems.add(path, "cannot open '" + path.text() + "'");
  };
  kind.fields = [](const ferry::KeyValue&) {
    return std::vector<ferry::FieldSpec>{ferry::FieldSpec{.name = "record"}};
  };
  kind.decoded_fields = [](const ferry::KeyValue& source) {
    return std::vector<ferry::DecodedField>{{"record", &source, source.text_or("decoder", "text_numbers")}};
  };
  return kind;
}

}  // namespace records
