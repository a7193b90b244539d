// The token-window source kinds: `megatron` (a Megatron-LM indexed dataset, .bin + .idx) and `tokens`
// (a flat binary of tokens, nanoGPT's train.bin), cut into windows with the same keys.
#include <climits>
#include <cstdlib>

#include <sys/stat.h>

#include "ferry/io/formats/builtin_source_kinds.h"
#include "ferry/io/formats/token_window_source.h"
#include "ferry/io/util/dataset_paths.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/io/util/regular_file.h"

namespace ferry {
namespace {

using Type = KeySpec::Type;

// The keys both kinds take after where their tokens are: how windows are cut and delivered.
// `output_default` is the kind's default output_dtype.
std::vector<KeySpec> window_keys(const std::string& seq_len_default, const std::string& output_default) {
  return {
      {.name = "seq_len",
       .type = Type::kInteger,
       .description = "Tokens per training sequence.",
       .default_value = seq_len_default,
       .example = "4096",
       .min = 1,
       .max = 1073741824},
      {.name = "add_extra_token",
       .type = Type::kBoolean,
       .description = "Windows of seq_len + 1 tokens, for the shifted labels.",
       .default_value = "true",
       .example = "false"},
      {.name = "windows",
       .type = Type::kChoice,
       .description = "`strided`: window i starts at token i x seq_len (consecutive windows share one token); "
                      "`random`: each sample starts at an offset drawn from (sampler.seed, epoch, sample), as nanoGPT "
                      "draws its batches.",
       .default_value = "strided",
       .example = "random",
       .choices = {"strided", "random"}},
      {.name = "samples",
       .type = Type::kInteger,
       .description = "Random windows per epoch.",
       .default_value = "as many as strided windows",
       .example = "100000",
       .min = 1,
       .expected = "an integer >= 1",
       .type_text = "integer >= 1"},
      {.name = "output_dtype",
       .type = Type::kChoice,
       .description = "The delivered tokens' type: `int64` (what cross_entropy takes), `int32`, or `stored` (as the "
                      "file stores them; uint16 and uint32 widened where libtorch lacks them).",
       .default_value = output_default,
       .example = "int32",
       .choices = {"stored", "int32", "int64"}},
      {.name = "split",
       .type = Type::kList,
       .description = "Two field names, inputs and targets: the window's first seq_len tokens and its last seq_len "
                      "(one token later), each contiguous. Without it, one field `tokens` of the whole window.",
       .default_value = "one field `tokens`",
       .example = "[x, y]",
       .min = 2,
       .max = 2,
       .item = {{.name = "", .type = Type::kString, .min = 1, .expected = "a field name"}},
       .expected = "two field names, e.g. [x, y]",
       .type_text = "[inputs, targets] names"},
      {.name = "document_ids",
       .type = Type::kBoolean,
       .description = "Also the field `document_ids`: int64 per input token, 0 for the window's first document and "
                      "one more at each document start (for an attention mask that keeps packed documents apart).",
       .default_value = "false",
       .example = "true"},
      {.name = "position_ids",
       .type = Type::kBoolean,
       .description = "Also the field `position_ids`: int64 per input token, its position in its document (0 at the "
                      "window's start and at each document start), as Megatron-LM's reset_position_ids.",
       .default_value = "false",
       .example = "true"},
      {.name = "eod_token",
       .type = Type::kInteger,
       .description = "The end-of-document token (GPT-2's 50256): a document starts after each. A Megatron dataset "
                      "without it uses its own documents (its .idx).",
       .default_value = "none",
       .example = "50256"},
  };
}

std::vector<FieldSpec> window_fields(const KeyValue& source) {
  std::vector<FieldSpec> fields;
  if (const KeyValue* split = source.find("split")) {
    for (const KeyValue& name : split->items()) fields.push_back(FieldSpec{.name = name.text()});
  } else {
    fields.push_back(FieldSpec{.name = "tokens"});
  }
  for (const char* ids : {"document_ids", "position_ids"}) {
    if (source.boolean_or(ids, false)) fields.push_back(FieldSpec{.name = ids});
  }
  return fields;
}

void check_windows(const KeyValue& source, KeyProblems& problems) {
  if (const KeyValue* split = source.find("split")) {
    if (split->items().size() == 2 && split->items()[0].text() == split->items()[1].text()) {
      problems.add(*split, "inputs and targets need two different names");
    }
    if (!source.boolean_or("add_extra_token", true)) {
      problems.add(*split, "split needs add_extra_token: true (targets are the inputs one token later)");
    }
  }
  const bool ids = source.boolean_or("document_ids", false) || source.boolean_or("position_ids", false);
  if (ids && source.find("eod_token") == nullptr && source.has("path")) {
    const KeyValue* key =
        source.find("document_ids") != nullptr ? source.find("document_ids") : source.find("position_ids");
    problems.add(*key,
                 "a token file has no documents of its own: give eod_token, the token that ends each (GPT-2's "
                 "50256)");
  }
  if (const KeyValue* samples = source.find("samples");
      samples != nullptr && source.text_or("windows", "") != "random") {
    problems.add(*samples, "samples counts random windows: set windows: random, or leave samples out");
  }
}

void check_megatron(const KeyValue& source, KeyProblems& problems) {
  check_windows(source, problems);
  const KeyValue& prefix = source.at("prefix");
  // Found now, with the key's place, rather than when the dataset is opened.
  if (const auto why = detail::unsupported_path(prefix.text())) {
    problems.add(prefix, *why);
    return;
  }
  if (prefix.text().starts_with("pipe:")) {
    problems.add(prefix,
                 "a Megatron dataset is read at random, not as a stream: give a path or an http://, https:// or "
                 "s3:// prefix, not pipe:");
    return;
  }
  if (detail::is_fetched_path(prefix.text())) return;  // asked for when the source is made
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

void check_tokens(const KeyValue& source, KeyProblems& problems) {
  check_windows(source, problems);
  const KeyValue& path = source.at("path");
  if (const auto why = detail::unsupported_path(path.text())) {
    problems.add(path, *why);
    return;
  }
  if (detail::is_fetched_path(path.text())) return;  // asked for when the source is made
  struct stat info {};
  if (::stat(path.text().c_str(), &info) != 0) {
    problems.add(path, detail::missing_text(path.text(), "token file"));
    return;
  }
  if (const auto kind = detail::special_file_kind(path.text())) {
    problems.add(path, "'" + path.text() + "' is " + *kind + ", not a regular file: a token file is mapped whole");
    return;
  }
  const std::optional<TokenType> type = token_type_named(source.text_or("dtype", "uint16"));
  const auto width = static_cast<uint64_t>(token_type_size(type.value_or(TokenType::kUInt16)));
  const auto bytes = static_cast<uint64_t>(info.st_size);
  if (bytes % width != 0) {
    const KeyValue* dtype = source.find("dtype");
    problems.add(dtype != nullptr ? *dtype : path,
                 "'" + path.text() + "' holds " + std::to_string(bytes) + " bytes, not a whole number of " +
                     std::string(token_type_name(*type)) + " tokens (" + std::to_string(width) +
                     " bytes each): is dtype right? " + std::to_string(bytes % width) +
                     " bytes are left over at byte offset " + std::to_string(bytes - bytes % width));
  }
}

// What decides which tokens a sample holds, beside where they lie.
void window_order(const TokenWindowOptions& options, std::map<std::string, std::string>& order) {
  order["source.seq_len"] = std::to_string(options.seq_len);
  order["source.add_extra_token"] = options.add_extra_token ? "true" : "false";
  if (options.windows == TokenWindows::kRandom) {
    order["source.windows"] = "random";
    if (options.samples > 0) order["source.samples"] = std::to_string(options.samples);
  }
}

}  // namespace

TokenWindowOptions token_window_options(const KeyValue& source, uint64_t seed) {
  TokenWindowOptions options;
  options.prefix = source.text_or("prefix", "");
  options.path = source.text_or("path", "");
  if (const auto type = token_type_named(source.text_or("dtype", "uint16"))) options.type = *type;
  options.seq_len = source.integer_or("seq_len", source.has("path") ? 1024 : options.seq_len);
  options.add_extra_token = source.boolean_or("add_extra_token", options.add_extra_token);
  options.windows = source.text_or("windows", "strided") == "random" ? TokenWindows::kRandom : TokenWindows::kStrided;
  options.samples = source.unsigned_or("samples", 0);
  options.seed = seed;
  // A token file delivers int64 unless told otherwise; a Megatron dataset, as stored (its default of old).
  const std::string output = source.text_or("output_dtype", source.has("path") ? "int64" : "stored");
  if (output != "stored") options.output_dtype = parse_dtype(output);
  if (const KeyValue* split = source.find("split")) {
    for (const KeyValue& name : split->items()) options.split.push_back(name.text());
  }
  options.document_ids = source.boolean_or("document_ids", false);
  options.position_ids = source.boolean_or("position_ids", false);
  if (const KeyValue* eod = source.find("eod_token")) options.eod_token = eod->integer();
  return options;
}

namespace detail {

SourceKind megatron_source_kind() {
  SourceKind kind;
  kind.name = "megatron";
  kind.description =
      "A Megatron-LM indexed token dataset (`.bin` + `.idx`). Samples are windows of `seq_len + 1` tokens over the "
      "documents back to back, one field `tokens` (or the two `split` fields) in the file's dtype (uint16 is widened "
      "to int32 where libtorch has no uint16) or `output_dtype`.";
  kind.keys = {{.name = "prefix",
                .type = Type::kPath,
                .description = "The dataset's path without `.bin`/`.idx`; or an http://, https:// or s3:// URL without "
                               "them (the .idx is fetched whole, the .bin in blocks).",
                .default_value = "required",
                .required = true,
                .example = "data/tokens",
                .min = 1,
                .expected = "a path prefix",
                .missing = "the dataset's path without .bin/.idx"}};
  for (KeySpec& key : window_keys("2048", "stored")) kind.keys.push_back(std::move(key));
  kind.make_in = [](const KeyValue& source, const MakeContext& context) {
    TokenWindowOptions options = token_window_options(source, context.seed);
    options.remote = context.remote;
    return std::make_shared<TokenWindowSource>(std::move(options));
  };
  kind.check = check_megatron;
  kind.fields = window_fields;
  kind.order = [](const KeyValue& source, const Source&) {
    const TokenWindowOptions megatron = token_window_options(source, 0);
    std::map<std::string, std::string> order;
    // The file, not the text: a relative and an absolute path to one dataset are the same order.
    char bin[PATH_MAX];
    order["source.prefix"] =
        ::realpath((megatron.prefix + ".bin").c_str(), bin) != nullptr ? std::string(bin) : megatron.prefix;
    window_order(megatron, order);
    return order;
  };
  return kind;
}

SourceKind tokens_source_kind() {
  SourceKind kind;
  kind.name = "tokens";
  kind.description =
      "A flat binary of tokens back to back, without a header (nanoGPT's `train.bin`, written with numpy's tofile), of "
      "any size. Samples are windows of `seq_len + 1` tokens, strided or at random offsets, delivered as int64 by "
      "default.";
  kind.keys = {{.name = "path",
                .type = Type::kPath,
                .description = "The token file: a path, an http://, https:// or s3:// URL (read in blocks), or "
                               "pipe:COMMAND.",
                .default_value = "required",
                .required = true,
                .example = "data/tokens.bin",
                .min = 1,
                .expected = "a file path",
                .missing = "the token file, e.g. train.bin"},
               {.name = "dtype",
                .type = Type::kChoice,
                .description = "How the file stores each token.",
                .default_value = "uint16",
                .example = "uint32",
                .choices = {"uint8", "uint16", "int16", "uint32", "int32", "int64"}}};
  for (KeySpec& key : window_keys("1024", "int64")) kind.keys.push_back(std::move(key));
  kind.make_in = [](const KeyValue& source, const MakeContext& context) {
    TokenWindowOptions options = token_window_options(source, context.seed);
    options.remote = context.remote;
    return std::make_shared<TokenWindowSource>(std::move(options));
  };
  kind.check = check_tokens;
  kind.fields = window_fields;
  kind.order = [](const KeyValue& source, const Source&) {
    const TokenWindowOptions tokens = token_window_options(source, 0);
    std::map<std::string, std::string> order;
    order["source.path"] = detail::real_path(tokens.path);
    order["source.dtype"] = std::string(token_type_name(tokens.type));
    window_order(tokens, order);
    return order;
  };
  kind.error_key = "source.path";
  return kind;
}

}  // namespace detail
}  // namespace ferry
