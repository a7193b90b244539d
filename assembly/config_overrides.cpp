// --set key.path=value (or a program's overrides): applied to the YAML tree before it is read, each
// remembered as where the keys it sets come from.
#include <algorithm>
#include <charconv>

#include "ferry/assembly/config_reader.h"

namespace ferry::detail {
namespace {

std::string join_path(const std::string& parent, std::string_view name) {
  return parent.empty() ? std::string(name) : parent + "." + std::string(name);
}

}  // namespace

void ConfigReader::apply_overrides(Node& root) {
  for (const std::string& text : overrides_) {
    const size_t equals = text.find('=');
    // A program's overrides are named as it gave them (a Python dict's key), the command line's as typed.
    const std::string where = overrides_origin_ == OverrideOrigin::kCommandLine || equals == std::string::npos
                                  ? "--set " + text
                                  : "overrides['" + text.substr(0, equals) + "'] = " + text.substr(equals + 1);
    if (equals == std::string::npos || equals == 0) {
      problems_.push_back({where, "", "expected key.path=value"});
      continue;
    }
    const std::string path = text.substr(0, equals);
    std::string why;
    const std::optional<std::vector<std::string>> parts = key_path(path, why);
    if (!parts) {
      problems_.push_back({where, path,
                           "expected key.path=value, e.g. source.fields.0.name=x or "
                           "source.fields[0].name=x: " +
                               why});
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
std::optional<std::vector<std::string>> ConfigReader::key_path(const std::string& path, std::string& why) {
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
void ConfigReader::set_path(Node& root, const std::vector<std::string>& parts, const Node& value,
                            const std::string& where) {
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
                             "'" + part + "' is not an index of this list of " + std::to_string(node.size()) + " (0.." +
                                 std::to_string(node.size()) + ")"});
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

}  // namespace ferry::detail
