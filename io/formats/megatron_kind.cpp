// The `megatron` source kind: a Megatron-LM indexed token dataset (.bin + .idx), cut into windows.
#include <climits>
#include <cstdlib>

#include <sys/stat.h>

#include "ferry/io/formats/builtin_source_kinds.h"
#include "ferry/io/formats/token_window_source.h"
#include "ferry/io/util/dataset_paths.h"
#include "ferry/io/util/regular_file.h"

namespace ferry {
namespace {

using Type = KeySpec::Type;

void check_megatron(const KeyValue& source, KeyProblems& problems) {
  const KeyValue& prefix = source.at("prefix");
  // Found now, with the key's place, rather than when the dataset is opened.
  if (const auto why = detail::unsupported_path(prefix.text())) {
    problems.add(prefix, *why);
    return;
  }
  std::vector<std::string> missing;
  for (const char* suffix : {".idx", ".bin"}) {
    struct stat info {};
    const std::string path = prefix.text() + suffix;
    if (::stat(path.c_str(), &info) != 0) {
      missing.push_back(path);
    } else if (const auto kind = detail::special_file_kind(path)) {  // a FIFO would block the open
      problems.add(prefix, "'" + path + "' is " + *kind + ", not a regular file: a Megatron dataset is mapped whole");
    }
  }
  if (missing.size() == 2) {
    problems.add(prefix, detail::missing_text(prefix.text(), "dataset") + " (neither its .idx nor its .bin exists)" +
                             detail::make_dataset_hint("tokens", prefix.text()));
  } else if (missing.size() == 1) {
    problems.add(prefix, detail::missing_text(missing.front()) + ", beside the other half");
  }
}

}  // namespace

TokenWindowOptions megatron_options(const KeyValue& source) {
  TokenWindowOptions options;
  options.prefix = source.at("prefix").text();
  options.seq_len = source.integer_or("seq_len", options.seq_len);
  options.add_extra_token = source.boolean_or("add_extra_token", options.add_extra_token);
  return options;
}

namespace detail {

SourceKind megatron_source_kind() {
  SourceKind kind;
  kind.name = "megatron";
  kind.description =
      "A Megatron-LM indexed token dataset (`.bin` + `.idx`). Samples are windows of `seq_len + 1` tokens over the "
      "documents back to back, one field `tokens` in the file's dtype (uint16 is widened to int32 where libtorch has "
      "no uint16).";
  kind.keys = {
      {.name = "prefix",
       .type = Type::kPath,
       .description = "The dataset's path without `.bin`/`.idx`.",
       .default_value = "required",
       .required = true,
       .example = "data/tokens",
       .min = 1,
       .expected = "a path prefix",
       .missing = "the dataset's path without .bin/.idx"},
      {.name = "seq_len",
       .type = Type::kInteger,
       .description = "Tokens per training sequence.",
       .default_value = "2048",
       .example = "4096",
       .min = 1,
       .max = 1073741824},
      {.name = "add_extra_token",
       .type = Type::kBoolean,
       .description = "Windows of seq_len + 1 tokens, for the shifted labels.",
       .default_value = "true",
       .example = "false"},
  };
  kind.make = [](const KeyValue& source) { return std::make_shared<TokenWindowSource>(megatron_options(source)); };
  kind.check = check_megatron;
  kind.fields = [](const KeyValue&) { return std::vector<FieldSpec>{FieldSpec{.name = "tokens"}}; };
  kind.order = [](const KeyValue& source, const Source&) {
    const TokenWindowOptions megatron = megatron_options(source);
    std::map<std::string, std::string> order;
    // The file, not the text: a relative and an absolute path to one dataset are the same order.
    char resolved[PATH_MAX];
    order["source.prefix"] =
        ::realpath((megatron.prefix + ".bin").c_str(), resolved) != nullptr ? std::string(resolved) : megatron.prefix;
    order["source.seq_len"] = std::to_string(megatron.seq_len);
    order["source.add_extra_token"] = megatron.add_extra_token ? "true" : "false";
    return order;
  };
  return kind;
}

}  // namespace detail
}  // namespace ferry
