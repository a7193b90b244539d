#include "ferry/assembly/config_loader.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include <sys/stat.h>
#include <unistd.h>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "ferry/assembly/config_schema.h"
#include "ferry/assembly/dataset_paths.h"
#include "ferry/assembly/text_file.h"
#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/io/util/printable.h"
#include "ferry/io/util/units.h"

namespace ferry {
namespace {

using YAML::Node;

constexpr uint64_t kMaxInteger = uint64_t{1} << 62;

std::string join_path(const std::string& parent, std::string_view name) {
  return parent.empty() ? std::string(name) : parent + "." + std::string(name);
}

// What a node holds, for "expected X, found Y".
std::string found_text(const Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "'" + node.Scalar() + "'";
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" for the nearest candidate within a few edits, else "".
std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(name, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best.empty() ? std::string() : " (did you mean '" + best + "'?)";
}

std::string list_text(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Where each document of a YAML text starts and where its root node is, read without building the
// documents. Instead of YAML::LoadAll, which never returns on some malformed text: a ',' where a
// document starts is never consumed, and yaml-cpp 0.7 reads an empty document there again and again,
// holding each, until memory runs out (found by tests/fuzz/config_loader_fuzz).
class DocumentMarks : public YAML::EventHandler {
 public:
  struct Document {
    YAML::Mark start;
    std::optional<YAML::Mark> root;
  };
  const std::vector<Document>& documents() const noexcept { return documents_; }

  void OnDocumentStart(const YAML::Mark& mark) override { documents_.push_back({mark, std::nullopt}); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override { node(mark); }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnMapEnd() override {}

 private:
  void node(const YAML::Mark& mark) {
    if (!documents_.empty() && !documents_.back().root) documents_.back().root = mark;
  }
  std::vector<Document> documents_;
};

// The documents of `text`. Throws YAML::ParserException for malformed YAML, including a document
// that starts where the one before it did (the parser is stuck there).
std::vector<DocumentMarks::Document> document_marks(std::string_view text) {
  std::istringstream stream{std::string(text)};
  YAML::Parser parser(stream);
  DocumentMarks marks;
  while (parser.HandleNextDocument(marks)) {
    const std::vector<DocumentMarks::Document>& documents = marks.documents();
    if (documents.size() > 1 && documents.back().start.pos == documents[documents.size() - 2].start.pos) {
      const auto at = static_cast<size_t>(documents.back().start.pos);
      const std::string found = at < text.size() ? "'" + printable(text.substr(at, 1), 1) + "'" : "the end";
      throw YAML::ParserException(documents.back().start, "unexpected " + found + " where a document starts");
    }
  }
  return marks.documents();
}

// Reads YAML text into a Config, collecting problems instead of stopping at the first. One per
// load; not thread-safe (it needs not be).
class ConfigLoader {
 public:
  ConfigLoader(std::string origin, const std::vector<std::string>& overrides)
      : origin_(std::move(origin)), overrides_(overrides) {
    config_.origin = origin_;
  }

  Config load(std::string_view text) {
    Node root;
    try {
      const std::vector<DocumentMarks::Document> documents = document_marks(text);
      if (documents.size() > 1) {
        throw ConfigError({{position(documents[1].root.value_or(documents[1].start)), "",
                            "a config is one YAML document; this file holds " + std::to_string(documents.size()) +
                                " (separated by ---)"}});
      }
      if (!documents.empty()) root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      // The parser's own position is the best there is for malformed YAML.
      throw ConfigError({{position(e.mark), "", "invalid YAML: " + e.msg}});
    }
    if (!root.IsDefined() || root.IsNull()) root = Node(YAML::NodeType::Map);
    if (!root.IsMap()) {
      throw ConfigError({{position(root.Mark()), "",
                          "expected a mapping of keys (source:, batch_size:, ...), found " + found_text(root)}});
    }
    apply_overrides(root);
    read_root(root);
    check_combinations();
    if (!problems_.empty()) throw ConfigError(std::move(problems_));
    return std::move(config_);
  }

 private:
  // ---- where things are --------------------------------------------------------------------

  std::string position(const YAML::Mark& mark) const {
    if (mark.is_null() || mark.line < 0) return origin_;
    return origin_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
  }

  // An overridden key (or one inside an overridden section) is located at its --set.
  std::string location(const std::string& key, const Node& node) const {
    for (std::string prefix = key;;) {
      if (const auto found = overridden_.find(prefix); found != overridden_.end()) return found->second;
      const size_t cut = prefix.find_last_of(".[");
      if (cut == std::string::npos) break;
      prefix.resize(cut);
    }
    return node.IsDefined() ? position(node.Mark()) : origin_;
  }

  void problem(const std::string& key, const Node& node, std::string message) {
    problems_.push_back({location(key, node), key, std::move(message)});
  }
  void expected(const std::string& key, const Node& node, const std::string& what) {
    problem(key, node, "expected " + what + ", found " + found_text(node));
  }
  void note(const std::string& key, const Node& node) {
    config_.locations[key] = location(key, node);
    if (node.IsScalar()) config_.values[key] = node.Scalar();
  }
  // A problem found after reading, about keys read before: located where `key` was set.
  void problem_at(const std::string& key, std::string message) {
    problems_.push_back({config_.where(key), key, std::move(message)});
  }

  // ---- --set key.path=value ----------------------------------------------------------------

  void apply_overrides(Node& root) {
    for (const std::string& text : overrides_) {
      const std::string where = "--set " + text;
      const size_t equals = text.find('=');
      if (equals == std::string::npos || equals == 0) {
        problems_.push_back({where, "", "expected key.path=value"});
        continue;
      }
      const std::string path = text.substr(0, equals);
      std::string why;
      const std::optional<std::vector<std::string>> parts = key_path(path, why);
      if (!parts) {
        problems_.push_back({where, path, "expected key.path=value, e.g. source.fields.0.name=x or "
                                          "source.fields[0].name=x: " + why});
        continue;
      }
      Node value;
      try {
        value = YAML::Load(text.substr(equals + 1));
      } catch (const YAML::Exception& e) {
        problems_.push_back({where, text.substr(0, equals), "invalid YAML value: " + e.msg});
        continue;
      }
      set_path(root, *parts, value, where);
    }
  }

  // The parts of a --set key: names joined by '.', and list indices as ".N" or "[N]"
  // ("source.fields[0].name" and "source.fields.0.name" are the same). Nothing else: an unclosed or
  // stray bracket, a name inside brackets or an empty name is refused with `why`, not guessed at.
  static std::optional<std::vector<std::string>> key_path(const std::string& path, std::string& why) {
    std::vector<std::string> parts;
    size_t i = 0;
    while (i < path.size()) {
      if (path[i] == '[') {
        const size_t close = path.find(']', i);
        const std::string index = path.substr(i + 1, close == std::string::npos ? std::string::npos : close - i - 1);
        if (parts.empty()) {
          why = "'[' at character " + std::to_string(i + 1) + " does not follow a key";
          return std::nullopt;
        }
        if (close == std::string::npos) {
          why = "'[' at character " + std::to_string(i + 1) + " is not closed";
          return std::nullopt;
        }
        if (index.empty() || !std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          why = "'[" + index + "]' is not a list index (a whole number)";
          return std::nullopt;
        }
        parts.push_back(index);
        i = close + 1;
        if (i < path.size() && path[i] != '.' && path[i] != '[') {
          why = "expected '.' or '[' after ']' at character " + std::to_string(i + 1);
          return std::nullopt;
        }
        if (i < path.size() && path[i] == '.') ++i;
        if (i == path.size() && path.back() == '.') break;  // a trailing '.', refused below
        continue;
      }
      const size_t end = path.find_first_of(".[]", i);
      const std::string name = path.substr(i, end == std::string::npos ? std::string::npos : end - i);
      if (name.empty()) {
        why = path[i] == ']' ? "']' at character " + std::to_string(i + 1) + " was not opened"
                             : "an empty key name at character " + std::to_string(i + 1);
        return std::nullopt;
      }
      parts.push_back(name);
      i = end == std::string::npos ? path.size() : end;
      if (i < path.size() && path[i] == ']') {
        why = "']' at character " + std::to_string(i + 1) + " was not opened";
        return std::nullopt;
      }
      if (i < path.size() && path[i] == '.') ++i;
    }
    if (parts.empty() || path.back() == '.') {
      why = "key names must not be empty";
      return std::nullopt;
    }
    return parts;
  }

  // Puts `value` at `parts` (of "pool.slab_size", "source.fields.0.dtype"), creating sections on
  // the way; a number indexes a list (one past its end appends).
  void set_path(Node& root, const std::vector<std::string>& parts, const Node& value, const std::string& where) {
    Node node;
    node.reset(root);
    std::string key;
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string& part = parts[i];
      const bool last = i + 1 == parts.size();
      if (node.IsSequence()) {
        size_t index = 0;
        const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), index);
        if (error != std::errc() || end != part.data() + part.size() || index > node.size()) {
          problems_.push_back({where, key,
                               "'" + part + "' is not an index of this list of " + std::to_string(node.size()) +
                                   " (0.." + std::to_string(node.size()) + ")"});
          return;
        }
        key += "[" + part + "]";
        if (index == node.size()) {
          overridden_[key] = where;  // a new element: all of it comes from this --set
          node.push_back(last ? value : Node(YAML::NodeType::Map));
          if (last) break;
        } else if (last) {
          node[index] = value;
          break;
        }
        Node next;
        next.reset(node[index]);
        node.reset(next);
        continue;
      }
      key = join_path(key, part);
      if (node.IsDefined() && !node.IsNull() && !node.IsMap()) {
        problems_.push_back({where, key, "cannot set a key inside " + found_text(node)});
        return;
      }
      if (last) {
        node[part] = value;
        break;
      }
      if (!node[part].IsDefined() || node[part].IsNull()) {
        overridden_[key] = where;  // a new section: all of it comes from this --set
        node[part] = Node(YAML::NodeType::Map);
      }
      Node next;
      next.reset(node[part]);
      node.reset(next);
    }
    overridden_[key] = where;
  }

  // ---- structure -----------------------------------------------------------------------------

  // Checks that `node` is a mapping whose keys all belong to `section` of the schema (reporting
  // unknown keys with the nearest known one, and keys given twice). False if it is not a mapping.
  bool mapping(const Node& node, const std::string& key, std::string_view section) {
    if (!node.IsMap()) {
      expected(key, node, "a mapping of keys (" + list_text(config_section_keys(section)) + ")");
      return false;
    }
    const std::vector<std::string> known = config_section_keys(section);
    std::map<std::string, YAML::Mark> seen;
    for (const auto& entry : node) {
      const Node& name_node = entry.first;
      const std::string name = name_node.IsScalar() ? name_node.Scalar() : found_text(name_node);
      const std::string path = join_path(key, name);
      if (const auto [it, inserted] = seen.emplace(name, name_node.Mark()); !inserted) {
        problems_.push_back({location(path, name_node), path,
                             "given twice (first at line " + std::to_string(it->second.line + 1) + ")"});
        continue;
      }
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        const std::string where_known = section.empty() ? "at the top level" : "in " + key;
        problems_.push_back(
            {location(path, name_node), path,
             "unknown key" + did_you_mean(name, known) + "; known " + where_known + ": " + list_text(known)});
      }
    }
    note(key, node);
    return true;
  }

  // Reports keys given twice in a mapping whose keys are not the schema's (field names).
  void check_unique_keys(const Node& map, const std::string& key) {
    std::map<std::string, YAML::Mark> seen;
    for (const auto& entry : map) {
      const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : found_text(entry.first);
      if (const auto [it, inserted] = seen.emplace(name, entry.first.Mark()); !inserted) {
        const std::string path = join_path(key, name);
        problems_.push_back({location(path, entry.first), path,
                             "given twice (first at line " + std::to_string(it->second.line + 1) + ")"});
      }
    }
  }

  // The node under `name`, if the mapping has it.
  static std::optional<Node> child(const Node& map, std::string_view name) {
    if (!map.IsMap()) return std::nullopt;
    Node value = map[std::string(name)];
    if (!value.IsDefined()) return std::nullopt;
    return value;
  }

  std::optional<std::string> scalar(const Node& node, const std::string& key, const std::string& what) {
    if (!node.IsScalar()) {
      expected(key, node, what);
      return std::nullopt;
    }
    note(key, node);
    return node.Scalar();
  }

  static bool is_auto(const Node& node) { return node.IsScalar() && node.Scalar() == "auto"; }

  std::optional<uint64_t> integer(const Node& node, const std::string& key, uint64_t min, uint64_t max,
                                  const std::string& what) {
    const auto text = scalar(node, key, what);
    if (!text) return std::nullopt;
    uint64_t value = 0;
    const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (error != std::errc() || end != text->data() + text->size() || value < min || value > max) {
      expected(key, node, what);
      return std::nullopt;
    }
    return value;
  }

  std::optional<int64_t> signed_integer(const Node& node, const std::string& key, const std::string& what) {
    const auto text = scalar(node, key, what);
    if (!text) return std::nullopt;
    int64_t value = 0;
    const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (error != std::errc() || end != text->data() + text->size()) {
      expected(key, node, what);
      return std::nullopt;
    }
    return value;
  }

  std::optional<double> number(const Node& node, const std::string& key) {
    const auto text = scalar(node, key, "a number");
    if (!text) return std::nullopt;
    std::string_view digits = *text;
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
    double value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error != std::errc() || end != digits.data() + digits.size() || !std::isfinite(value)) {
      expected(key, node, "a finite number");
      return std::nullopt;
    }
    return value;
  }

  std::optional<bool> boolean(const Node& node, const std::string& key) {
    const auto text = scalar(node, key, "true or false");
    if (!text) return std::nullopt;
    if (*text == "true" || *text == "yes" || *text == "on") return true;
    if (*text == "false" || *text == "no" || *text == "off") return false;
    expected(key, node, "true or false");
    return std::nullopt;
  }

  std::optional<std::string> choice(const Node& node, const std::string& key, const std::vector<std::string>& choices) {
    const std::string what = "one of " + list_text(choices);
    const auto text = scalar(node, key, what);
    if (!text) return std::nullopt;
    if (std::find(choices.begin(), choices.end(), *text) != choices.end()) return text;
    problem(key, node, "expected " + what + ", found '" + *text + "'" + did_you_mean(*text, choices));
    return std::nullopt;
  }

  std::optional<uint64_t> size(const Node& node, const std::string& key, uint64_t min, const std::string& what) {
    const auto text = scalar(node, key, what);
    if (!text) return std::nullopt;
    const auto bytes = parse_byte_size(*text);
    if (!bytes || *bytes < min) {
      expected(key, node, what);
      return std::nullopt;
    }
    return bytes;
  }

  // A [first, second] pair of numbers.
  std::optional<std::pair<double, double>> pair(const Node& node, const std::string& key, const std::string& what) {
    if (!node.IsSequence() || node.size() != 2) {
      expected(key, node, what);
      return std::nullopt;
    }
    note(key, node);
    const auto first = number(node[0], key + "[0]");
    const auto second = number(node[1], key + "[1]");
    if (!first || !second) return std::nullopt;
    return std::pair{*first, *second};
  }

  // ---- sections --------------------------------------------------------------------------------

  void read_root(const Node& root) {
    mapping(root, "", "");
    if (const auto source = child(root, "source")) {
      read_source(*source);
    } else {
      problem("source", root,
              "missing required key (where the samples come from, e.g. source: {kind: synthetic, fields: [...]})");
    }
    PipelineOptions& options = config_.pipeline;
    if (const auto node = child(root, "batch_size")) {
      if (auto value = integer(*node, "batch_size", 1, 1 << 24, "an integer in 1..16777216"))
        options.batch_size = *value;
    }
    if (const auto node = child(root, "prefetch")) {
      if (auto value = integer(*node, "prefetch", 1, 1024, "an integer in 1..1024")) options.prefetch = *value;
    }
    if (const auto node = child(root, "max_batches")) {
      if (auto value = integer(*node, "max_batches", 0, kMaxInteger, "an integer >= 0 (0: no limit)"))
        options.max_batches = *value;
    }
    if (const auto node = child(root, "sampler")) read_sampler(*node);
    if (const auto node = child(root, "decode")) read_decode(*node);
    if (const auto node = child(root, "collate")) read_collate(*node);
    if (const auto node = child(root, "pool")) read_pool(*node);
    if (const auto node = child(root, "transfer")) read_transfer(*node);
    if (const auto node = child(root, "cache")) read_cache(*node);
    if (const auto node = child(root, "augment")) read_augment(*node);
    if (const auto node = child(root, "stats")) read_stats(*node);
  }

  void read_source(const Node& node) {
    if (!mapping(node, "source", "source")) return;
    const auto kind_node = child(node, "kind");
    if (!kind_node) {
      problem("source.kind", node, "missing required key (one of: synthetic, megatron, tar, image_folder)");
      return;
    }
    const auto kind = choice(*kind_node, "source.kind", {"synthetic", "megatron", "tar", "image_folder"});
    if (!kind) return;
    config_.source.kind = *kind;
    // Each kind takes its own keys; another kind's key is a mistake worth naming.
    static const std::map<std::string, std::vector<std::string>> kKindKeys{
        {"synthetic", {"kind", "samples", "seed", "fields"}},
        {"megatron", {"kind", "prefix", "seq_len", "add_extra_token"}},
        {"tar", {"kind", "shards", "members"}},
        {"image_folder", {"kind", "root", "extensions", "image"}},
    };
    const std::vector<std::string>& allowed = kKindKeys.at(*kind);
    for (const auto& entry : node) {
      const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : std::string();
      const std::vector<std::string> known = config_section_keys("source");
      if (std::find(known.begin(), known.end(), name) != known.end() &&
          std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        problem("source." + name, entry.first,
                "not a key of source kind '" + *kind + "' (its keys: " + list_text(allowed) + ")");
      }
    }
    if (*kind == "megatron") {
      read_megatron(node);
      return;
    }
    if (*kind == "tar") {
      read_tar(node);
      return;
    }
    if (*kind == "image_folder") {
      read_image_folder(node);
      return;
    }
    SyntheticOptions& synthetic = config_.source.synthetic;
    if (const auto samples = child(node, "samples")) {
      if (auto value = integer(*samples, "source.samples", 1, kMaxInteger, "an integer >= 1"))
        synthetic.samples = *value;
    }
    if (const auto seed = child(node, "seed")) {
      if (auto value = integer(*seed, "source.seed", 0, std::numeric_limits<uint64_t>::max(), "an integer >= 0"))
        synthetic.seed = *value;
    }
    const auto fields = child(node, "fields");
    if (!fields) {
      problem("source.fields", node,
              "missing required key (the fields of each sample, e.g. [{name: x, dtype: float32, shape: [4]}])");
      return;
    }
    if (!fields->IsSequence() || fields->size() == 0) {
      expected("source.fields", *fields, "a non-empty list of fields ({name, dtype, shape, length, range})");
      return;
    }
    note("source.fields", *fields);
    std::map<std::string, std::string> first_seen;  // name -> key path
    for (size_t i = 0; i < fields->size(); ++i) {
      const std::string key = "source.fields[" + std::to_string(i) + "]";
      if (auto field = read_field((*fields)[i], key)) {
        if (const auto [it, inserted] = first_seen.emplace(field->name, key); !inserted) {
          problem(key + ".name", (*fields)[i]["name"],
                  "field '" + field->name + "' appears twice (also " + it->second + ")");
        }
        synthetic.fields.push_back(std::move(*field));
      }
    }
  }

  void read_megatron(const Node& node) {
    TokenWindowOptions& megatron = config_.source.megatron;
    const auto prefix = child(node, "prefix");
    if (!prefix) {
      problem("source.prefix", node, "missing required key (the dataset's path without .bin/.idx)");
    } else if (auto text = scalar(*prefix, "source.prefix", "a path prefix"); text && !text->empty()) {
      // Found now, with the key's place, rather than when the dataset is opened.
      if (const auto why = detail::unsupported_path(*text)) {
        problem("source.prefix", *prefix, *why);
      } else {
        std::vector<std::string> missing;
        for (const char* suffix : {".idx", ".bin"}) {
          struct stat info {};
          if (::stat((*text + suffix).c_str(), &info) != 0) missing.push_back(*text + suffix);
        }
        if (missing.size() == 2) {
          problem("source.prefix", *prefix,
                  detail::missing_text(*text, "dataset") + " (neither its .idx nor its .bin exists)" +
                      detail::make_dataset_hint("tokens", *text));
        } else if (missing.size() == 1) {
          problem("source.prefix", *prefix, detail::missing_text(missing.front()) + ", beside the other half");
        }
      }
      megatron.prefix = *text;
    } else if (text) {
      expected("source.prefix", *prefix, "a path prefix");
    }
    if (const auto value = child(node, "seq_len")) {
      if (auto seq_len = integer(*value, "source.seq_len", 1, 1 << 30, "an integer in 1..1073741824")) {
        megatron.seq_len = static_cast<int64_t>(*seq_len);
      }
    }
    if (const auto value = child(node, "add_extra_token")) {
      if (auto flag = boolean(*value, "source.add_extra_token")) megatron.add_extra_token = *flag;
    }
  }

  void read_tar(const Node& node) {
    TarShardOptions& tar = config_.source.tar;
    const auto shards = child(node, "shards");
    if (!shards) {
      problem("source.shards", node, "missing required key (the tar shards: a path or a list of paths)");
    } else if (!shards->IsScalar() && !shards->IsSequence()) {
      expected("source.shards", *shards, "a path or a list of paths");
    } else {
      note("source.shards", *shards);
      const size_t count = shards->IsScalar() ? 1 : shards->size();
      for (size_t i = 0; i < count; ++i) {
        const Node item = shards->IsScalar() ? *shards : (*shards)[i];
        const std::string key = shards->IsScalar() ? "source.shards" : "source.shards[" + std::to_string(i) + "]";
        const auto pattern = scalar(item, key, "a path");
        if (!pattern) continue;
        if (const auto why = detail::unsupported_path(*pattern)) {
          problem(key, item, *why);
          continue;
        }
        try {
          std::vector<std::string> missing;
          const std::vector<std::string> expanded = TarShardSource::expand_braces(*pattern);
          for (const std::string& shard : expanded) {
            struct stat info {};
            if (::stat(shard.c_str(), &info) != 0) {
              missing.push_back(shard);
            } else {
              tar.shards.push_back(shard);
            }
          }
          const std::string hint = missing.size() == expanded.size() ? detail::tar_dataset_hint(expanded) : "";
          if (expanded.size() > 1 && missing.size() == expanded.size()) {  // one problem, not thousands
            problem(key, item,
                    detail::missing_text(*pattern) + " (none of its " + std::to_string(expanded.size()) +
                        " shards exists)" + hint);
          } else {
            for (const std::string& shard : missing) problem(key, item, detail::missing_text(shard) + hint);
          }
        } catch (const Error& e) {
          problem(key, item, e.cause());
        }
      }
    }
    const auto members = child(node, "members");
    if (!members) return;
    if (!members->IsSequence()) {
      expected("source.members", *members,
               "a list of members ({name, extension, dtype, shape, max_length, decoder, optional})");
      return;
    }
    note("source.members", *members);
    for (size_t i = 0; i < members->size(); ++i) {
      const Node member = (*members)[i];
      const std::string key = "source.members[" + std::to_string(i) + "]";
      if (!mapping(member, key, "source.members[]")) continue;
      TarField field;
      for (const char* required : {"name", "extension"}) {
        const auto value = child(member, required);
        const std::string path = key + "." + required;
        if (!value) {
          problem(path, member, "missing required key");
        } else if (auto text = scalar(*value, path, "a non-empty name"); text && !text->empty()) {
          (std::string_view(required) == "name" ? field.name : field.extension) = *text;
        } else if (text) {
          expected(path, *value, "a non-empty name");
        }
      }
      if (const auto value = child(member, "dtype")) {
        if (auto text = choice(*value, key + ".dtype", dtype_names())) field.dtype = parse_dtype(*text);
      }
      bool shape_read = true;  // false: a problem with the shape is reported already
      const auto shape = child(member, "shape");
      if (shape) {
        if (!read_shape(*shape, key + ".shape", field.shape)) shape_read = false;
      }
      if (const auto value = child(member, "max_length")) {
        if (auto length = integer(*value, key + ".max_length", 1, 1 << 30, "an integer in 1..1073741824")) {
          field.max_length = static_cast<int64_t>(*length);
        }
      }
      bool decoder_read = true;
      if (const auto value = child(member, "decoder")) {
        if (auto name = decoder_name(*value, key + ".decoder")) {
          field.decoder = *name;
        } else {
          decoder_read = false;
        }
      }
      if (const auto value = child(member, "optional")) {
        if (auto flag = boolean(*value, key + ".optional")) field.optional = *flag;
      }
      if (decoder_read && shape_read) {
        if (is_image_decoder(field.decoder) && field.dtype != at::kByte) {
          problem(key + ".dtype", member["dtype"],
                  "the " + field.decoder + " decoder makes uint8 images, found " + dtype_name(field.dtype));
        }
        check_image_format(key + ".decoder", child(member, "decoder").value_or(member), field.decoder,
                           {field.extension});
        read_jpeg_keys(member, key, field.name, field.decoder, shape ? std::optional<Node>(*shape) : std::nullopt,
                       field.shape);
      }
      tar.fields.push_back(std::move(field));
    }
  }

  // A list of integers >= 0 into `shape` (replacing it). False after reporting a problem.
  bool read_shape(const Node& node, const std::string& key, std::vector<int64_t>& shape) {
    if (!node.IsSequence()) {
      expected(key, node, "a list of integers >= 0, e.g. [224, 224, 3]");
      return false;
    }
    note(key, node);
    shape.clear();
    bool ok = true;
    for (size_t d = 0; d < node.size(); ++d) {
      const auto size =
          integer(node[d], key + "[" + std::to_string(d) + "]", 0, 1 << 30, "an integer in 0..1073741824");
      if (size)
        shape.push_back(static_cast<int64_t>(*size));
      else
        ok = false;
    }
    return ok;
  }

  // A registered decoder's name, or nullopt after reporting a problem.
  std::optional<std::string> decoder_name(const Node& node, const std::string& key) {
    const std::vector<std::string> registered = DecoderRegistry::global().names();
    auto text = scalar(node, key, "a decoder name (" + list_text(registered) + ")");
    if (!text) return std::nullopt;
    if (std::find(registered.begin(), registered.end(), *text) == registered.end()) {
      problem(key, node,
              "unknown decoder '" + *text + "'" + did_you_mean(*text, registered) +
                  "; registered: " + list_text(registered));
      return std::nullopt;
    }
    return text;
  }

  // The decoders that make images, resize and crop: jpeg, png, and image (either, by the bytes).
  static bool is_image_decoder(std::string_view decoder) {
    return decoder == "jpeg" || decoder == "png" || decoder == "image";
  }

  // A decoder of one image format over files of another (png files through jpeg, say) fails on every
  // sample: said now, at `key`, with the decoder that reads them.
  void check_image_format(const std::string& key, const Node& node, const std::string& decoder,
                          const std::vector<std::string>& extensions) {
    for (const std::string& extension : extensions) {
      // The format is the last part: "seg.png" (a tar member) and ".png" (an image folder's) are PNGs.
      const size_t dot = extension.rfind('.');
      const std::string shown = dot == std::string::npos ? extension : extension.substr(dot + 1);
      const bool png = equal_ignoring_case(shown, "png");
      const bool jpeg = equal_ignoring_case(shown, "jpg") || equal_ignoring_case(shown, "jpeg");
      if ((decoder == "jpeg" && png) || (decoder == "png" && jpeg)) {
        problem(key, node,
                "the " + decoder + " decoder cannot read ." + shown + " files; use decoder: " + (png ? "png" : "jpeg") +
                    ", or decoder: image, which reads JPEG and PNG files alike");
        return;
      }
    }
  }

  // The checks of a field decoded by an image decoder (a tar member, image_folder's image) and its
  // keys resize_shorter and crop, which give it a decoder of its own (config_.source.jpeg). `node`
  // is the field's mapping at `key`; `shape_node` where its shape was given, if it was.
  void read_jpeg_keys(const Node& node, const std::string& key, const std::string& field, const std::string& decoder,
                      const std::optional<Node>& shape_node, const std::vector<int64_t>& shape) {
    const auto resize = child(node, "resize_shorter");
    const auto crop = child(node, "crop");
    if (const auto device = child(node, "device")) {
      if (auto text = choice(*device, key + ".device", {"cpu", "gpu", "auto"})) {
        if (*text != "cpu" && decoder != "jpeg") {
          problem(key + ".device", *device,
                  "device: " + *text + " is the jpeg decoder's (nvJPEG decodes JPEGs); this field's decoder is '" +
                      decoder + "'");
        } else {
          config_.pipeline.decode_devices[field] = *text == "gpu"    ? DecodeDevice::kGpu
                                                   : *text == "auto" ? DecodeDevice::kAuto
                                                                     : DecodeDevice::kCpu;
        }
      }
    }
    JpegFieldOptions options;
    bool resize_read = false, crop_read = false;
    if (resize) {
      if (auto pixels = integer(*resize, key + ".resize_shorter", 1, 65535, "an integer in 1..65535 (pixels)")) {
        options.resize_shorter = static_cast<int64_t>(*pixels);
        resize_read = true;
      }
    }
    if (crop) {
      if (auto text = choice(*crop, key + ".crop", {"center", "random"})) {
        options.crop = *text == "random" ? JpegDecodeOptions::Crop::kRandom : JpegDecodeOptions::Crop::kCenter;
        crop_read = true;
      }
    }
    options.decoder = decoder;
    if (!is_image_decoder(decoder)) {
      // Only the image decoders resize and crop: another would ignore them silently.
      for (const auto& [name, value, read] :
           {std::tuple{"resize_shorter", resize, resize_read}, std::tuple{"crop", crop, crop_read}}) {
        if (value && read) {
          problem(key + "." + name, *value,
                  std::string(name) +
                      " is applied by the image decoders only (jpeg, png, image); this field's "
                      "decoder is '" +
                      decoder + "' (set decoder: jpeg, or remove " + name + ")");
        }
      }
      return;
    }
    if (shape.size() != 3 || shape[0] == 0 || shape[1] == 0 || shape[2] != 3) {
      std::string found;
      for (const int64_t size : shape)
        found += (found.empty() ? "" : ", ") + (size == kVariableLength ? "*" : std::to_string(size));
      if (shape_node) {
        problem(key + ".shape", *shape_node,
                "the " + decoder + " decoder makes [H, W, 3] images (H, W >= 1), found [" + found + "]");
      } else {
        problem(
            key + ".shape", node,
            "missing required key: the " + decoder + " decoder makes images of a fixed [H, W, 3], e.g. [224, 224, 3]");
      }
      return;
    }
    // After the resize every image's shorter side is resize_shorter, so only a crop no larger than
    // that fits every image (a portrait and a landscape one alike); a larger one fails on some sample.
    const int64_t needed = std::max(shape[0], shape[1]);
    if (resize_read && options.resize_shorter < needed) {
      problem(key + ".resize_shorter", *resize,
              "resize_shorter " + std::to_string(options.resize_shorter) + " is smaller than the crop [" +
                  std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "] (" + key +
                  ".shape): each image's shorter side becomes " + std::to_string(options.resize_shorter) +
                  " pixels, so the crop does not fit; use resize_shorter >= " + std::to_string(needed));
      return;
    }
    // Neither key: the shared decoder of that name, and every image must already be [H, W].
    if ((resize || crop) && resize_read == bool(resize) && crop_read == bool(crop))
      config_.source.jpeg[field] = options;
  }

  void read_image_folder(const Node& node) {
    ImageFolderOptions& folder = config_.source.image_folder;
    const auto root = child(node, "root");
    if (!root) {
      problem("source.root", node, "missing required key (the folder holding one sub-folder per class)");
    } else if (auto text = scalar(*root, "source.root", "a folder path"); text && !text->empty()) {
      // Found now, with the key's place, rather than when the folder is scanned.
      struct stat info {};
      if (const auto why = detail::unsupported_path(*text)) {
        problem("source.root", *root, *why);
      } else if (::stat(text->c_str(), &info) != 0) {
        problem("source.root", *root,
                detail::missing_text(*text, "folder") + detail::make_dataset_hint("images", *text));
      } else if (!S_ISDIR(info.st_mode)) {
        problem("source.root", *root, "not a folder: " + detail::absolute_path(*text));
      }
      folder.root = *text;
    } else if (text) {
      expected("source.root", *root, "a folder path");
    }
    if (const auto extensions = child(node, "extensions")) {
      const std::string what = "a non-empty list of file extensions, e.g. [jpg, jpeg]";
      if (!extensions->IsSequence() || extensions->size() == 0) {
        expected("source.extensions", *extensions, what);
      } else {
        note("source.extensions", *extensions);
        folder.extensions.clear();
        for (size_t i = 0; i < extensions->size(); ++i) {
          const std::string key = "source.extensions[" + std::to_string(i) + "]";
          auto text = scalar((*extensions)[i], key, "an extension such as jpg");
          if (text && text->starts_with('.')) text->erase(0, 1);
          if (text && (text->empty() || text->find('/') != std::string::npos)) {
            expected(key, (*extensions)[i], "an extension such as jpg");
          } else if (text) {
            folder.extensions.push_back(*text);
          }
        }
      }
    }
    folder.image.decoder = "jpeg";  // the YAML default: images decoded (the C++ default is raw bytes)
    const auto image = child(node, "image");
    if (!image) {
      problem("source.image", node, "missing required key (how the images decode, e.g. image: {shape: [224, 224, 3]})");
      return;
    }
    if (!mapping(*image, "source.image", "source.image")) return;
    bool decoder_read = true;
    if (const auto value = child(*image, "decoder")) {
      if (auto name = decoder_name(*value, "source.image.decoder")) {
        folder.image.decoder = *name;
      } else {
        decoder_read = false;
      }
    }
    const auto shape = child(*image, "shape");
    const bool shape_read = !shape || read_shape(*shape, "source.image.shape", folder.image.shape);
    if (decoder_read && shape_read) {
      read_jpeg_keys(*image, "source.image", folder.image.name, folder.image.decoder,
                     shape ? std::optional<Node>(*shape) : std::nullopt, folder.image.shape);
      check_image_format("source.image.decoder", child(*image, "decoder").value_or(*image), folder.image.decoder,
                         folder.extensions);
    }
  }

  std::optional<SyntheticField> read_field(const Node& node, const std::string& key) {
    if (!mapping(node, key, "source.fields[]")) return std::nullopt;
    SyntheticField field;
    bool ok = true;
    const auto name = child(node, "name");
    if (!name) {
      problem(key + ".name", node, "missing required key (the field's name)");
      ok = false;
    } else if (auto text = scalar(*name, key + ".name", "a name"); text && !text->empty()) {
      field.name = *text;
    } else {
      if (text) expected(key + ".name", *name, "a non-empty name");
      ok = false;
    }
    const auto dtype = child(node, "dtype");
    if (!dtype) {
      problem(key + ".dtype", node, "missing required key (one of: " + dtype_names_text() + ")");
      ok = false;
    } else if (auto text = choice(*dtype, key + ".dtype", dtype_names())) {
      field.dtype = parse_dtype(*text);
    } else {
      ok = false;
    }
    if (const auto shape = child(node, "shape")) {
      if (!shape->IsSequence()) {
        expected(key + ".shape", *shape, "a list of integers >= 0, e.g. [3, 64, 64]");
        ok = false;
      } else {
        note(key + ".shape", *shape);
        for (size_t d = 0; d < shape->size(); ++d) {
          const auto size = integer((*shape)[d], key + ".shape[" + std::to_string(d) + "]", 0, 1 << 30,
                                    "an integer in 0..1073741824");
          if (!size)
            ok = false;
          else
            field.shape.push_back(static_cast<int64_t>(*size));
        }
      }
    }
    if (const auto length = child(node, "length")) {
      const std::string length_key = key + ".length";
      if (const auto bounds = pair(*length, length_key, "[min, max] lengths, e.g. [16, 256]")) {
        const auto [min, max] = *bounds;
        if (min < 0 || max < min || min != std::floor(min) || max != std::floor(max) || max > (1 << 30)) {
          problem(length_key, *length,
                  "expected whole numbers with 0 <= min <= max <= 1073741824, found [" + number_text(min) + ", " +
                      number_text(max) + "]");
          ok = false;
        } else {
          field.variable = true;
          field.min_length = static_cast<int64_t>(min);
          field.max_length = static_cast<int64_t>(max);
          int64_t row = 1;
          for (int64_t size : field.shape) row *= size;
          if (row == 0) {
            problem(key + ".shape", node["shape"],
                    "a variable-length field needs rows of at least one element (no 0 in its shape)");
            ok = false;
          }
        }
      } else {
        ok = false;
      }
    }
    if (const auto range = child(node, "range")) {
      const std::string range_key = key + ".range";
      if (const auto bounds = pair(*range, range_key, "[low, high] values, e.g. [0, 1000]")) {
        if (!(bounds->first < bounds->second)) {
          problem(
              range_key, *range,
              "expected low < high, found [" + number_text(bounds->first) + ", " + number_text(bounds->second) + "]");
          ok = false;
        } else {
          field.range = *bounds;
        }
      } else {
        ok = false;
      }
    }
    if (!ok) return std::nullopt;
    // The source checks what is left (a range the dtype cannot hold): report it at the field.
    try {
      SyntheticSource check(SyntheticOptions{0, 1, {field}});
    } catch (const Error& e) {
      // Only the range is left unchecked above: the source knows each dtype's limits.
      problem(field.range ? key + ".range" : key, field.range ? node["range"] : node, e.cause());
      return std::nullopt;
    }
    return field;
  }

  void read_sampler(const Node& node) {
    if (!mapping(node, "sampler", "sampler")) return;
    SamplerConfig& sampler = config_.sampler;
    if (const auto value = child(node, "shuffle")) {
      if (auto flag = boolean(*value, "sampler.shuffle")) sampler.shuffle = *flag;
    }
    if (const auto value = child(node, "seed")) {
      if (auto seed = integer(*value, "sampler.seed", 0, std::numeric_limits<uint64_t>::max(), "an integer >= 0"))
        sampler.seed = *seed;
    }
    if (const auto value = child(node, "epochs")) {
      if (auto epochs = integer(*value, "sampler.epochs", 1, kMaxInteger, "an integer >= 1"))
        config_.pipeline.epochs = *epochs;
    }
    if (const auto value = child(node, "drop_last")) {
      if (auto flag = boolean(*value, "sampler.drop_last")) config_.pipeline.drop_last = *flag;
    }
    if (const auto value = child(node, "rank")) {
      if (is_auto(*value)) {
        note("sampler.rank", *value);
      } else if (auto rank = integer(*value, "sampler.rank", 0, 1 << 20, "auto or an integer >= 0")) {
        sampler.rank = *rank;
      }
    }
    if (const auto value = child(node, "world_size")) {
      if (is_auto(*value)) {
        note("sampler.world_size", *value);
      } else if (auto world = integer(*value, "sampler.world_size", 1, 1 << 20, "auto or an integer >= 1")) {
        sampler.world_size = *world;
      }
    }
    if (const auto value = child(node, "remainder")) {
      if (auto text = choice(*value, "sampler.remainder", {"pad", "drop"})) sampler.drop_remainder = *text == "drop";
    }
    if (const auto value = child(node, "shuffle_buffer")) {
      if (auto size = integer(*value, "sampler.shuffle_buffer", 0, 1 << 30,
                              "an integer in 0..1073741824 (0: a full shuffle)")) {
        sampler.shuffle_buffer = *size;
      }
    }
  }

  void read_decode(const Node& node) {
    if (!mapping(node, "decode", "decode")) return;
    PipelineOptions& options = config_.pipeline;
    if (const auto value = child(node, "threads")) {
      if (is_auto(*value)) {
        note("decode.threads", *value);
        options.decode_threads = 0;
      } else if (auto threads = integer(*value, "decode.threads", 1, 1024, "auto or an integer in 1..1024")) {
        options.decode_threads = *threads;
      }
    }
    if (const auto value = child(node, "on_error")) {
      if (auto text = choice(*value, "decode.on_error", {"fail", "skip"})) {
        options.on_error = *text == "skip" ? OnError::kSkip : OnError::kFail;
      }
    }
    if (const auto value = child(node, "decoders")) {
      if (!value->IsMap()) {
        expected("decode.decoders", *value, "a mapping of field name to decoder name, e.g. {image: raw}");
        return;
      }
      note("decode.decoders", *value);
      check_unique_keys(*value, "decode.decoders");
      const std::vector<std::string> registered = DecoderRegistry::global().names();
      for (const auto& entry : *value) {
        const std::string field = entry.first.Scalar();
        const std::string key = "decode.decoders." + field;
        const auto decoder = scalar(entry.second, key, "a decoder name (" + list_text(registered) + ")");
        if (!decoder) continue;
        if (std::find(registered.begin(), registered.end(), *decoder) == registered.end()) {
          problem(key, entry.second,
                  "unknown decoder '" + *decoder + "'" + did_you_mean(*decoder, registered) +
                      "; registered: " + list_text(registered));
          continue;
        }
        field_keys_.emplace_back(key, entry.first);
        options.decoders[field] = *decoder;
      }
    }
  }

  void read_collate(const Node& node) {
    if (!mapping(node, "collate", "collate")) return;
    CollateOptions& collate = config_.pipeline.collate;
    if (const auto value = child(node, "pad_value")) {
      if (auto pad = number(*value, "collate.pad_value")) collate.pad_value = *pad;
    }
    if (const auto value = child(node, "pad_values")) {
      if (!value->IsMap()) {
        expected("collate.pad_values", *value, "a mapping of field name to pad value, e.g. {tokens: 0}");
      } else {
        note("collate.pad_values", *value);
        check_unique_keys(*value, "collate.pad_values");
        for (const auto& entry : *value) {
          const std::string field = entry.first.Scalar();
          const std::string key = "collate.pad_values." + field;
          if (auto pad = number(entry.second, key)) {
            field_keys_.emplace_back(key, entry.first);
            collate.pad_values[field] = *pad;
          }
        }
      }
    }
    if (const auto value = child(node, "lengths_suffix")) {
      if (auto suffix = scalar(*value, "collate.lengths_suffix", "a non-empty suffix")) {
        if (suffix->empty())
          expected("collate.lengths_suffix", *value, "a non-empty suffix");
        else
          collate.lengths_suffix = *suffix;
      }
    }
  }

  void read_pool(const Node& node) {
    if (!mapping(node, "pool", "pool")) return;
    PoolOptions& pool = config_.pipeline.pool;
    if (const auto value = child(node, "slab_size")) {
      if (is_auto(*value)) {
        note("pool.slab_size", *value);
      } else if (auto bytes = size(*value, "pool.slab_size", 1, "auto or a size such as 64MiB, 1.5GB or 4096")) {
        pool.slab_bytes = *bytes;
      }
    }
    if (const auto value = child(node, "slab_count")) {
      if (is_auto(*value)) {
        note("pool.slab_count", *value);
      } else if (auto count = integer(*value, "pool.slab_count", 1, 65536, "auto or an integer in 1..65536")) {
        pool.slab_count = *count;
      }
    }
    if (const auto value = child(node, "budget")) {
      if (value->IsScalar() && value->Scalar() == "unlimited") {
        note("pool.budget", *value);
      } else if (auto bytes = size(*value, "pool.budget", 1, "unlimited or a size such as 2GiB")) {
        pool.budget_bytes = *bytes;
      }
    }
  }

  void read_cache(const Node& node) {
    if (!mapping(node, "cache", "cache")) return;
    CacheOptions& cache = config_.pipeline.cache;
    if (const auto value = child(node, "memory")) {
      if (auto text = choice(*value, "cache.memory", {"off", "managed", "device", "host"})) {
        cache.memory = *text == "managed"  ? CacheMemory::kManaged
                       : *text == "device" ? CacheMemory::kDevice
                       : *text == "host"   ? CacheMemory::kHost
                                           : CacheMemory::kOff;
      }
    }
    if (const auto value = child(node, "max_bytes")) {
      if (value->IsScalar() && value->Scalar() == "unlimited") {
        note("cache.max_bytes", *value);
      } else if (auto bytes = size(*value, "cache.max_bytes", 1, "unlimited or a size such as 40GiB")) {
        cache.max_bytes = *bytes;
      }
    }
  }

  // A [min, max] pair with 0 < min <= max (<= `most`, when given).
  std::optional<std::pair<double, double>> positive_range(const Node& node, const std::string& key,
                                                          std::optional<double> most) {
    const std::string what =
        "[min, max] with 0 < min <= max" + (most ? " <= " + number_text(*most) : std::string());
    auto range = pair(node, key, what);
    if (range && !(range->first > 0 && range->first <= range->second && (!most || range->second <= *most))) {
      expected(key, node, what);
      return std::nullopt;
    }
    return range;
  }

  // Three numbers, one per channel.
  std::optional<std::array<double, 3>> triple(const Node& node, const std::string& key, bool positive) {
    const std::string what = positive ? "a list of 3 numbers > 0 (R, G, B)" : "a list of 3 numbers (R, G, B)";
    if (!node.IsSequence() || node.size() != 3) {
      expected(key, node, what);
      return std::nullopt;
    }
    note(key, node);
    std::array<double, 3> values{};
    for (size_t c = 0; c < 3; ++c) {
      const auto value = number(node[c], key + "[" + std::to_string(c) + "]");
      if (!value) return std::nullopt;
      if (positive && *value <= 0) {
        expected(key + "[" + std::to_string(c) + "]", node[c], "a number > 0");
        return std::nullopt;
      }
      values[c] = *value;
    }
    return values;
  }

  void read_augment(const Node& node) {
    if (!mapping(node, "augment", "augment")) return;
    AugmentOptions& augment = config_.pipeline.augment;
    augment.field = "image";
    if (const auto value = child(node, "field")) {
      if (auto name = scalar(*value, "augment.field", "a field name")) {
        if (name->empty()) {
          expected("augment.field", *value, "a field name");
        } else {
          augment.field = *name;
        }
      }
    }
    if (const auto crop = child(node, "random_resized_crop")) {
      if (mapping(*crop, "augment.random_resized_crop", "augment.random_resized_crop")) {
        augment.random_resized_crop = true;
        if (const auto size = child(*crop, "size")) {
          const std::string key = "augment.random_resized_crop.size";
          if (!size->IsSequence() || size->size() != 2) {
            expected(key, *size, "[height, width], each 1..65535");
          } else {
            note(key, *size);
            const auto height = integer((*size)[0], key + "[0]", 1, 65535, "an integer in 1..65535");
            const auto width = integer((*size)[1], key + "[1]", 1, 65535, "an integer in 1..65535");
            if (height && width) {
              augment.height = static_cast<int64_t>(*height);
              augment.width = static_cast<int64_t>(*width);
            }
          }
        }
        if (const auto value = child(*crop, "scale")) {
          if (auto range = positive_range(*value, "augment.random_resized_crop.scale", 1.0)) {
            std::tie(augment.scale_min, augment.scale_max) = *range;
          }
        }
        if (const auto value = child(*crop, "ratio")) {
          if (auto range = positive_range(*value, "augment.random_resized_crop.ratio", std::nullopt)) {
            std::tie(augment.ratio_min, augment.ratio_max) = *range;
          }
        }
      }
    }
    if (const auto value = child(node, "flip")) {
      if (auto p = number(*value, "augment.flip")) {
        if (*p >= 0 && *p <= 1) {
          augment.flip = *p;
        } else {
          expected("augment.flip", *value, "a probability in 0..1");
        }
      }
    }
    if (const auto normalize = child(node, "normalize")) {
      if (mapping(*normalize, "augment.normalize", "augment.normalize")) {
        augment.normalize = true;
        if (const auto mean = child(*normalize, "mean")) {
          if (auto means = triple(*mean, "augment.normalize.mean", false)) augment.mean = *means;
        }
        if (const auto deviation = child(*normalize, "std")) {
          if (auto deviations = triple(*deviation, "augment.normalize.std", true)) augment.std = *deviations;
        }
      }
    }
    if (const auto value = child(node, "dtype")) {
      if (auto text = choice(*value, "augment.dtype", {"float32", "float16", "bfloat16"})) {
        augment.dtype = *text == "float16"    ? AugmentOptions::DType::kFloat16
                        : *text == "bfloat16" ? AugmentOptions::DType::kBFloat16
                                              : AugmentOptions::DType::kFloat32;
      }
    }
    if (const auto value = child(node, "layout")) {
      if (auto text = choice(*value, "augment.layout", {"NCHW", "NHWC"})) {
        augment.layout = *text == "NHWC" ? AugmentOptions::Layout::kNHWC : AugmentOptions::Layout::kNCHW;
      }
    }
  }

  // cuda:007 as cuda:7, so that a GPU is not listed twice under two names.
  static std::string canonical(const std::string& device) {
    if (device.rfind("cuda:", 0) != 0) return device;
    return "cuda:" + std::to_string(std::stoul(device.substr(5)));
  }

  // transfer.devices: `all`, or a list of cpu and cuda:N (each GPU once; cpu may repeat: a host share).
  void read_devices(const Node& transfer, const Node& value) {
    const std::string what = "all, or a list of devices such as [cuda:0, cuda:1]";
    if (const auto device = child(transfer, "device")) {
      // The one given by --set wins over the file's (a config made for one GPU, run on several); both in
      // the same place is a contradiction.
      const bool device_set = location("transfer.device", *device).rfind("--set ", 0) == 0;
      const bool devices_set = location("transfer.devices", value).rfind("--set ", 0) == 0;
      if (device_set && !devices_set) return;
      if (device_set == devices_set) {
        problem("transfer.devices", value,
                "transfer.device is set too: give one device (transfer.device) or several (transfer.devices)");
        return;
      }
    }
    if (value.IsScalar()) {
      if (value.Scalar() == "all") {
        note("transfer.devices", value);
        config_.devices = {"all"};
      } else {
        expected("transfer.devices", value, what);
      }
      return;
    }
    if (!value.IsSequence() || value.size() == 0) {
      expected("transfer.devices", value, what);
      return;
    }
    note("transfer.devices", value);
    std::vector<std::string> devices;
    std::string listed;
    for (size_t i = 0; i < value.size(); ++i) {
      const std::string key = "transfer.devices[" + std::to_string(i) + "]";
      const auto device = scalar(value[i], key, "cpu or cuda:N");
      if (!device) continue;
      const bool numbered = device->rfind("cuda:", 0) == 0 && device->size() > 5 && device->size() <= 9 &&
                            device->find_first_not_of("0123456789", 5) == std::string::npos;
      if (*device != "cpu" && !numbered) {
        expected(key, value[i], "cpu or cuda:N (a GPU by its number: in a list, cuda alone is ambiguous)");
      } else if (numbered && std::find(devices.begin(), devices.end(), canonical(*device)) != devices.end()) {
        problem(key, value[i], *device + " is listed twice: each GPU gets one share of every step");
      } else {
        devices.push_back(canonical(*device));
      }
      listed += (listed.empty() ? "" : ", ") + *device;
    }
    config_.values["transfer.devices"] = "[" + listed + "]";
    config_.devices = std::move(devices);
  }

  void read_transfer(const Node& node) {
    if (!mapping(node, "transfer", "transfer")) return;
    PipelineOptions& options = config_.pipeline;
    TransferOptions& transfer = options.transfer;
    if (const auto value = child(node, "device")) {
      const std::string what = "auto, cpu, cuda or cuda:N";
      if (auto device = scalar(*value, "transfer.device", what)) {
        const bool numbered = device->rfind("cuda:", 0) == 0 && device->size() > 5 && device->size() <= 9 &&
                              device->find_first_not_of("0123456789", 5) == std::string::npos;
        if (*device == "auto" || *device == "cpu" || *device == "cuda" || numbered) {
          options.device = *device;
        } else {
          problem("transfer.device", *value,
                  "expected " + what + ", found '" + *device + "'" + did_you_mean(*device, {"auto", "cpu", "cuda"}));
        }
      }
    }
    if (const auto value = child(node, "devices")) read_devices(node, *value);
    if (const auto value = child(node, "stream_priority")) {
      if (auto text = choice(*value, "transfer.stream_priority", {"normal", "high"}))
        transfer.high_priority_stream = *text == "high";
    }
    if (const auto value = child(node, "wait")) {
      if (auto text = choice(*value, "transfer.wait", {"poll", "spin"}))
        transfer.wait = *text == "spin" ? WaitMode::kSpin : WaitMode::kPoll;
    }
    if (const auto value = child(node, "max_chunk")) {
      if (auto bytes = size(*value, "transfer.max_chunk", 4096, "a size of at least 4KiB, such as 32MiB"))
        transfer.max_chunk_bytes = *bytes;
    }
    if (const auto value = child(node, "alignment")) {
      auto bytes = size(*value, "transfer.alignment", 1, "a power of two up to 4096, such as 16");
      if (bytes && (*bytes > 4096 || (*bytes & (*bytes - 1)) != 0)) {
        expected("transfer.alignment", *value, "a power of two up to 4096, such as 16");
      } else if (bytes) {
        transfer.min_alignment = *bytes;
      }
    }
    if (const auto value = child(node, "parallel_pack")) {
      if (auto bytes = size(*value, "transfer.parallel_pack", 0, "a size such as 1MiB"))
        transfer.parallel_pack_bytes = *bytes;
    }
    if (const auto value = child(node, "direct_copy")) {
      if (auto bytes = size(*value, "transfer.direct_copy", 0, "a size such as 1MiB (0: never)"))
        transfer.direct_copy_bytes = *bytes;
    }
  }

  void read_stats(const Node& node) {
    if (!mapping(node, "stats", "stats")) return;
    StatsConfig& stats = config_.stats;
    if (const auto value = child(node, "progress")) {
      if (auto text = choice(*value, "stats.progress", {"auto", "live", "plain", "off"})) {
        using Progress = StatsConfig::Progress;
        stats.progress = *text == "live"    ? Progress::kLive
                         : *text == "plain" ? Progress::kPlain
                         : *text == "off"   ? Progress::kOff
                                            : Progress::kAuto;
      }
    }
    if (const auto value = child(node, "interval")) {
      if (auto text = scalar(*value, "stats.interval", "a duration such as 5s or 500ms")) {
        const auto duration = parse_duration(*text);
        if (!duration || duration->count() < 100) {
          expected("stats.interval", *value, "a duration of at least 100ms, such as 5s or 500ms");
        } else {
          stats.interval = *duration;
        }
      }
    }
    if (const auto value = child(node, "report")) {
      if (value->IsNull()) {
        note("stats.report", *value);
      } else if (auto path = scalar(*value, "stats.report", "a file path")) {
        // Found now rather than after a long run: the report's folder must exist.
        const size_t slash = path->rfind('/');
        const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path->substr(0, slash);
        struct stat info {};
        if (::stat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
          problem("stats.report", *value, "the folder '" + folder + "' does not exist");
        } else if (::access(folder.c_str(), W_OK) != 0) {
          problem("stats.report", *value, "the folder '" + folder + "' is not writable");
        } else if (::stat(path->c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
          problem("stats.report", *value, "'" + *path + "' is a folder; expected a file path");
        } else {
          stats.report_path = *path;
        }
      }
    }
  }

  // ---- combinations ----------------------------------------------------------------------------

  void check_combinations() {
    const PipelineOptions& options = config_.pipeline;
    // Per-field keys must name a field of the source: (name, variable length) by kind.
    std::vector<std::pair<std::string, bool>> fields;
    if (config_.source.kind == "megatron") {
      fields.emplace_back("tokens", false);
    } else if (config_.source.kind == "tar") {
      // Without members the fields are known only once a shard is read: check_config sees them then.
      for (const TarField& field : config_.source.tar.fields) {
        fields.emplace_back(field.name, !field.shape.empty() && field.shape[0] == kVariableLength);
      }
    } else if (config_.source.kind == "image_folder") {
      fields.emplace_back(config_.source.image_folder.image.name, config_.source.image_folder.image.variable());
      fields.emplace_back("label", false);
    } else {
      for (const SyntheticField& field : config_.source.synthetic.fields)
        fields.emplace_back(field.name, field.variable);
    }
    std::vector<std::string> names;
    for (const auto& field : fields) names.push_back(field.first);
    if (!names.empty()) {
      for (const auto& [key, name_node] : field_keys_) {
        const std::string field = key.substr(key.rfind('.') + 1);
        if (std::find(names.begin(), names.end(), field) == names.end()) {
          problem(key, name_node,
                  "the source has no field '" + field + "'" + did_you_mean(field, names) +
                      "; its fields: " + list_text(names));
        }
      }
      for (const auto& [field, pad] : options.collate.pad_values) {
        const auto found = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == field; });
        if (found != fields.end() && !found->second) {
          problem_at("collate.pad_values." + field, "field '" + field + "' has a fixed length: it is never padded");
        }
      }
    }
    for (const auto& [field, decoder] : options.decoders) {
      if (config_.source.jpeg.count(field) != 0 && !is_image_decoder(decoder)) {
        problem_at("decode.decoders." + field,
                   "field '" + field +
                       "' sets resize_shorter or crop, which only the image decoders (jpeg, png, image) apply; "
                       "this names '" +
                       decoder + "'");
      }
    }
    const SamplerConfig& sampler = config_.sampler;
    if (sampler.shuffle_buffer > 0 && config_.source.kind == "tar" && !sampler.shuffle) {
      problem_at("sampler.shuffle_buffer",
                 "a shuffle buffer only acts with sampler.shuffle: true (this run reads in order)");
    }
    if (sampler.shuffle_buffer > 0 && config_.source.kind != "tar") {
      problem_at("sampler.shuffle_buffer", "a shuffle buffer shuffles tar shards (source.kind: tar); this source is '" +
                                               config_.source.kind + "', which sampler.shuffle shuffles fully");
    }
    if (sampler.rank && sampler.world_size && *sampler.rank >= *sampler.world_size) {
      problem_at("sampler.rank", "expected a rank below world_size (" + std::to_string(*sampler.world_size) +
                                     "), found " + std::to_string(*sampler.rank));
    }
    const PoolOptions& pool = options.pool;
    if (pool.slab_count != 0 && pool.slab_count < options.prefetch) {
      problem_at("pool.slab_count", "expected at least prefetch (" + std::to_string(options.prefetch) +
                                        ") slabs: every batch in flight holds one; found " +
                                        std::to_string(pool.slab_count));
    }
    // Whether pool.budget holds the slabs is checked with the source (check_config()), where the
    // slab size is known also when it is auto.

    // Note [dataset cache]: a cache repeats the first epoch's bytes, so no cached field may be cropped
    // at random (another crop every epoch). Sizes are checked with the source (check_config()).
    if (options.cache.enabled()) {
      for (const auto& [field, device] : options.decode_devices) {
        if (device != DecodeDevice::kCpu) {
          problem_at("cache.memory", "field '" + field + "' is decoded on the GPU (device: " +
                                         decode_device_name(device) +
                                         "), which the dataset cache does not support yet: use device: cpu with a "
                                         "cache, or cache.memory: off");
        }
      }
      for (const auto& [field, image] : config_.source.jpeg) {
        if (image.crop == JpegDecodeOptions::Crop::kRandom) {
          problem_at("cache.memory",
                     "field '" + field +
                         "' has crop: random, another crop every epoch, which a cache would repeat "
                         "from the first epoch: use crop: center for a cached field, or cache.memory: off");
        }
      }
    }
  }

  std::string origin_;
  const std::vector<std::string>& overrides_;
  std::map<std::string, std::string> overridden_;         // key path -> "--set ..."
  std::vector<std::pair<std::string, Node>> field_keys_;  // keys named after a field, to check later
  std::vector<ConfigProblem> problems_;
  Config config_;
};

}  // namespace

Config parse_config(std::string_view yaml, const std::string& origin, const std::vector<std::string>& overrides) {
  return ConfigLoader(origin, overrides).load(yaml);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  // A config is a few KiB; 16 MiB leaves room for long lists of shards and refuses the wrong file.
  return parse_config(read_text_file(path, size_t{16} << 20, "config file"), path, overrides);
}

}  // namespace ferry
