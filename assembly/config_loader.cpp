#include "ferry/assembly/config_loader.h"

#include <algorithm>
#include <sstream>

#include <yaml-cpp/eventhandler.h>

#include "ferry/assembly/config_reader.h"
#include "ferry/assembly/text_file.h"
#include "ferry/io/util/printable.h"

namespace ferry {
namespace detail {
namespace {

// The most values (scalars, lists, mappings) a config may hold: far beyond any config (a list of 100 000
// shards is one), and few enough that building them stays well under a gigabyte.
constexpr size_t kMaxConfigValues = 200000;
// The deepest nesting of lists and mappings: a config is a few levels deep.
constexpr size_t kMaxConfigDepth = 100;

struct TooManyValues {
  YAML::Mark mark;
};

// Where the flow lists and mappings of `text` ([...], {...}) nest deeper than kMaxConfigDepth, found
// without parsing (yaml-cpp's parser holds gigabytes for 16 MB of '['); nullopt otherwise. Quoted
// scalars and comments are skipped; block nesting needs indentation, which a file's size bounds.
std::optional<YAML::Mark> too_deep(std::string_view text) {
  size_t depth = 0;
  YAML::Mark mark;
  mark.line = 0;
  mark.column = 0;
  char quote = 0;
  bool comment = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++mark.line;
      mark.column = 0;
      comment = false;
      continue;
    }
    ++mark.column;
    if (comment) continue;
    if (quote != 0) {
      if (c == quote)
        quote = 0;  // '' in a single-quoted scalar closes and reopens it: same depth
      else if (c == '\\' && quote == '"')
        ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t')) {
      comment = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxConfigDepth) {
        mark.pos = static_cast<int>(i);
        mark.column -= 1;
        return mark;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
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
    // Counted while the text streams by, before any node is built: yaml-cpp's nodes take a few KiB
    // each, and a 15 MB list would otherwise take gigabytes before anything could be said about it.
    if (++values_ > kMaxConfigValues) throw TooManyValues{mark};
  }
  std::vector<Document> documents_;
  size_t values_ = 0;
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

}  // namespace

std::string list_text(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

namespace {

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

}  // namespace

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

namespace {

// `node` in YAML's flow style, shortened: at most a few items of each list or mapping, a few levels
// deep, each scalar cut short, so that a 15 MB list costs no more to show than a short one.
void append_short(const YAML::Node& node, int depth, std::string& out) {
  constexpr size_t kItems = 6;
  constexpr int kDepth = 3;
  if (!node.IsDefined() || node.IsNull()) {
    out += "null";
  } else if (node.IsScalar()) {
    out += printable(node.Scalar(), 40);
  } else if (depth >= kDepth) {
    out += node.IsSequence() ? "[...]" : "{...}";
  } else if (node.IsSequence()) {
    out += "[";
    for (size_t i = 0; i < node.size() && i < kItems; ++i) {
      if (i > 0) out += ", ";
      append_short(node[i], depth + 1, out);
    }
    if (node.size() > kItems) out += ", ... (" + std::to_string(node.size()) + " items)";
    out += "]";
  } else {
    out += "{";
    size_t i = 0;
    for (const auto& entry : node) {
      if (i == kItems) {
        out += ", ... (" + std::to_string(node.size()) + " keys)";
        break;
      }
      if (i++ > 0) out += ", ";
      append_short(entry.first, kDepth, out);
      out += ": ";
      append_short(entry.second, depth + 1, out);
    }
    out += "}";
  }
}

}  // namespace

std::string found_text(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsScalar()) return "'" + printable(node.Scalar(), 200) + "'";
  std::string text = node.IsSequence() ? "a list " : "a mapping ";
  append_short(node, 0, text);
  return text;
}

ConfigReader::ConfigReader(std::string origin, const std::vector<std::string>& overrides,
                           OverrideOrigin overrides_origin)
    : origin_(std::move(origin)), overrides_(overrides), overrides_origin_(overrides_origin) {
  config_.origin = origin_;
}

Config ConfigReader::load(std::string_view text) {
  Node root;
  if (const auto deep = too_deep(text)) {
    throw ConfigError({{position(*deep), "",
                        "lists and mappings nested more than " + std::to_string(kMaxConfigDepth) +
                            " levels deep: a config is a few levels deep (is it the right file?)"}});
  }
  try {
    const std::vector<DocumentMarks::Document> documents = document_marks(text);
    if (documents.size() > 1) {
      throw ConfigError({{position(documents[1].root.value_or(documents[1].start)), "",
                          "a config is one YAML document; this file holds " + std::to_string(documents.size()) +
                              " (separated by ---)"}});
    }
    if (!documents.empty()) root = YAML::Load(std::string(text));
  } catch (const TooManyValues& many) {
    throw ConfigError({{position(many.mark), "",
                        "more than " + std::to_string(kMaxConfigValues) +
                            " values: too many for a config (is it the right file? a long list of shards can be "
                            "a brace range, shard-{000000..099999}.tar)"}});
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
  if (!problems_.empty()) throw ConfigError(std::move(problems_.listed), problems_.more);
  return std::move(config_);
}

// ---- where things are ----------------------------------------------------------------------

std::string ConfigReader::position(const YAML::Mark& mark) const {
  if (mark.is_null() || mark.line < 0) return origin_;
  return origin_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

const std::string* ConfigReader::override_of(const std::string& key) const {
  for (std::string prefix = key;;) {
    if (const auto found = overridden_.find(prefix); found != overridden_.end()) return &found->second;
    const size_t cut = prefix.find_last_of(".[");
    if (cut == std::string::npos) return nullptr;
    prefix.resize(cut);
  }
}

std::string ConfigReader::location(const std::string& key, const Node& node) const {
  if (const std::string* where = override_of(key)) return *where;
  return node.IsDefined() ? position(node.Mark()) : origin_;
}

bool ConfigReader::overridden(const std::string& key) const { return override_of(key) != nullptr; }

void ConfigReader::problem(const std::string& key, const Node& node, std::string message) {
  problems_.push_back({location(key, node), key, std::move(message)});
}

void ConfigReader::expected(const std::string& key, const Node& node, const std::string& what) {
  problem(key, node, "expected " + what + ", found " + found_text(node));
}

void ConfigReader::note(const std::string& key, const Node& node) {
  config_.locations[key] = location(key, node);
  if (node.IsScalar()) config_.values[key] = node.Scalar();
}

void ConfigReader::problem_at(const std::string& key, std::string message) {
  problems_.push_back({config_.where(key), key, std::move(message)});
}

void ConfigReader::add(const KeyProblems& problems) {
  for (const KeyProblem& found : problems.list()) {
    problems_.push_back({found.where.empty() ? config_.where(found.key) : found.where, found.key, found.message});
  }
}

}  // namespace detail

Config parse_config(std::string_view yaml, const std::string& origin, const std::vector<std::string>& overrides,
                    OverrideOrigin overrides_origin) {
  return detail::ConfigReader(origin, overrides, overrides_origin).load(yaml);
}

Config parse_config(std::string_view yaml, const std::string& origin, const std::vector<std::string>& overrides) {
  return parse_config(yaml, origin, overrides, OverrideOrigin::kCommandLine);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides, OverrideOrigin origin) {
  // A config is a few KiB; 16 MiB leaves room for long lists of shards and refuses the wrong file.
  return parse_config(read_text_file(path, size_t{16} << 20, "config file"), path, overrides, origin);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return load_config(path, overrides, OverrideOrigin::kCommandLine);
}

}  // namespace ferry
