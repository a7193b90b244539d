// Decoder `text_numbers`: a line of text, numbers apart by `separator`, to a float32 tensor of the field's
// [columns]. A record with another count of numbers, or a word that is not a number, fails naming the
// column: the pipeline adds the record's file and line (or skips it under `on_error: skip`).
//
//   source: {kind: csv, path: data/records.csv, columns: 5, separator: ";"}
#include <cerrno>
#include <cstdlib>
#include <string>

#include <ATen/ops/empty.h>

#include "extensions.h"

namespace records {
namespace {

class TextNumbersDecoder : public ferry::Decoder {
 public:
  explicit TextNumbersDecoder(char separator) : separator_(separator) {}
  std::string_view name() const override { return "text_numbers"; }

  // Thread-safe: keeps no state. Allocates the output.
  at::Tensor decode(const at::Tensor& encoded, const ferry::FieldSpec& spec) const override {
    if (spec.dtype != at::kFloat || spec.shape.size() != 1) {
      throw ferry::Error("text_numbers makes float32 [columns]; the field is declared otherwise");
    }
    const std::string text(static_cast<const char*>(encoded.data_ptr()), static_cast<size_t>(encoded.numel()));
    const int64_t columns = spec.shape[0];
    at::Tensor out = at::empty({columns}, at::kFloat);
    float* values = out.data_ptr<float>();
    int64_t column = 0;
    for (size_t begin = 0; begin <= text.size(); ++column) {
      size_t end = text.find(separator_, begin);
      if (end == std::string::npos) end = text.size();
      const std::string word = text.substr(begin, end - begin);
      if (column >= columns) {
        throw ferry::Error("more than the " + std::to_string(columns) + " columns declared (source.columns)");
      }
      char* stop = nullptr;
      errno = 0;
      const float value = std::strtof(word.c_str(), &stop);
      if (word.empty() || stop != word.c_str() + word.size() || errno == ERANGE) {
        throw ferry::Error("column " + std::to_string(column + 1) + ": '" + word + "' is not a number");
      }
      values[column] = value;
      begin = end + 1;
    }
    if (column != columns) {
      throw ferry::Error(std::to_string(column) + " columns, not the " + std::to_string(columns) +
                         " declared (source.columns)");
    }
    return out;
  }

 private:
  char separator_;
};

}  // namespace

ferry::DecoderKind text_numbers_decoder_kind() {
  ferry::DecoderKind kind;
  kind.name = "text_numbers";
  kind.description = "A line of text, numbers apart by `separator`, to float32 [columns].";
  kind.keys = {{.name = "separator",
                .type = ferry::KeySpec::Type::kString,
                .description = "The character between two numbers.",
                .default_value = ",",
                .example = "';'",
                .min = 1,
                .max = 1,
                .expected = "one character"}};
  kind.make = [](const ferry::DecoderArgs& args) -> std::shared_ptr<const ferry::Decoder> {
    return std::make_shared<TextNumbersDecoder>(args.keys.text_or("separator", ",").front());
  };
  return kind;
}

}  // namespace records
