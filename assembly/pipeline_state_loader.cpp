#include "ferry/assembly/pipeline_state_loader.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <set>

#include <yaml-cpp/yaml.h>

#include "ferry/assembly/text_file.h"
#include "ferry/io/util/printable.h"

namespace ferry {
namespace {

std::string at(const std::string& origin, const YAML::Node& node) {
  if (!node.IsDefined()) return origin;  // also false for yaml-cpp's "zombie" node of a missing key
  const YAML::Mark mark = node.Mark();
  if (mark.is_null() || mark.line < 0) return origin;
  return origin + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// The value of `key` in a mapping, or nothing. yaml-cpp's operator[] returns an invalid node for a
// missing key, which throws "invalid node" on nearly any use: never let one out of here.
std::optional<YAML::Node> child(const YAML::Node& map, const char* key) {
  if (!map.IsDefined() || !map.IsMap()) return std::nullopt;
  const YAML::Node value = map[key];
  if (!value.IsDefined()) return std::nullopt;
  return value;
}

std::optional<uint64_t> whole_number(const std::optional<YAML::Node>& node) {
  if (!node || !node->IsScalar()) return std::nullopt;
  const std::string& text = node->Scalar();
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string shown(const YAML::Node& node) {
  if (!node.IsScalar()) return node.IsMap() ? "a mapping" : "a list";
  std::string text = "'";  // step by step: gcc 12 warns falsely (-Wrestrict) on "'" + ... once inlined
  text += printable(node.Scalar(), 40);
  text += '\'';
  return text;
}

// Keys other than `known` in a mapping: a typo, or a state from another program.
void unknown_keys(const YAML::Node& map, const std::set<std::string>& known, const std::string& origin,
                  const std::string& prefix, std::vector<ConfigProblem>& problems) {
  for (const auto& entry : map) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "?";
    if (!known.count(key)) {
      problems.push_back({at(origin, entry.first),
                          prefix + printable(key, 40), "unknown key in a saved state (expected one of: " + [&] {
                            std::string list;
                            for (const std::string& name : known) list += (list.empty() ? "" : ", ") + name;
                            return list;
                          }() + ")"});
    }
  }
}

uint64_t saturating_product(uint64_t a, uint64_t b) { return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b; }

}  // namespace

namespace {

YAML::Node load_state_text(std::string_view text, const std::string& origin) {
  try {
    return YAML::Load(std::string(text));  // JSON is YAML
  } catch (const YAML::Exception& e) {
    const std::string where =
        e.mark.is_null() ? origin
                         : origin + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    throw ConfigError({{where, "", "not a saved pipeline state: " + e.msg}});
  }
}

std::string format_of(const YAML::Node& root) {
  const std::optional<YAML::Node> format = child(root, "format");
  return format && format->IsScalar() ? format->Scalar() : std::string();
}

// One state object ("format": "ferry-state"); its problems are added to `problems`.
PipelineState state_from(const YAML::Node& root, const std::string& origin, std::vector<ConfigProblem>& problems) {
  const auto whole = [&](const std::optional<YAML::Node>& node, const YAML::Node& parent, const std::string& key,
                         const std::string& expected) -> std::optional<uint64_t> {
    const std::optional<uint64_t> value = whole_number(node);
    if (!value) {
      problems.push_back({at(origin, node ? *node : parent), key,
                          node ? expected + ", found " + shown(*node) : "missing (" + expected + ")"});
    }
    return value;
  };
  PipelineState state;
  state.origin = origin;
  unknown_keys(root, {"format", "version", "next_batch", "next", "last_delivered", "order"}, origin, "", problems);
  if (const auto version = whole(child(root, "version"), root, "version", "expected 1 (this ferry's state format)");
      version && *version != 1) {
    problems.push_back({at(origin, *child(root, "version")), "version", "expected 1 (this ferry's state format)"});
  }
  if (const auto next = whole(child(root, "next_batch"), root, "next_batch", "expected a whole number of batches")) {
    state.next_batch = *next;
  }
  if (const std::optional<YAML::Node> next = child(root, "next")) {
    if (!next->IsMap()) {
      problems.push_back(
          {at(origin, *next), "next", "expected {\"epoch\": N, \"batch\": N, \"position\": N} (whole numbers)"});
    } else {
      unknown_keys(*next, {"batch", "consumed", "epoch", "position"}, origin, "next.", problems);
      const auto epoch = whole(child(*next, "epoch"), *next, "next.epoch", "expected a whole number (an epoch)");
      const auto batch =
          whole(child(*next, "batch"), *next, "next.batch", "expected a whole number (a batch of the epoch)");
      const auto position = whole(child(*next, "position"), *next, "next.position",
                                  "expected a whole number (a position in the epoch's sample order)");
      if (epoch && batch && position) state.next = BatchCursor{*epoch, *batch, *position};
      if (child(*next, "consumed")) {
        state.consumed = whole(child(*next, "consumed"), *next, "next.consumed",
                               "expected a whole number (samples of the epoch all ranks took)");
      }
    }
  }
  if (const std::optional<YAML::Node> last = child(root, "last_delivered")) {
    if (!last->IsMap()) {
      problems.push_back({at(origin, *last), "last_delivered", "expected {\"epoch\": N, \"batch\": N}"});
    } else {
      unknown_keys(*last, {"batch", "epoch"}, origin, "last_delivered.", problems);
      state.last_epoch = whole(child(*last, "epoch"), *last, "last_delivered.epoch", "expected a whole number");
      state.last_index = whole(child(*last, "batch"), *last, "last_delivered.batch", "expected a whole number");
    }
  }
  const std::optional<YAML::Node> order = child(root, "order");
  if (!order || !order->IsMap()) {
    problems.push_back({at(origin, order ? *order : root), "order", "expected a mapping of key to value"});
  } else {
    for (const auto& entry : *order) {
      if (!entry.first.IsScalar() || !entry.second.IsScalar()) {
        problems.push_back({at(origin, entry.first), "order", "expected text keys and values"});
        continue;
      }
      state.order[entry.first.Scalar()] = entry.second.Scalar();
    }
  }
  return state;
}

}  // namespace

PipelineState parse_pipeline_state(std::string_view text, const std::string& origin) {
  const YAML::Node root = load_state_text(text, origin);
  if (format_of(root) != "ferry-state") {
    const std::string hint = format_of(root) == "ferry-states"
                                 ? " (this is the state of a group of devices: resume it with transfer.devices)"
                                 : "";
    throw ConfigError(
        {{at(origin, root), "format", "not a saved pipeline state (expected \"format\": \"ferry-state\")" + hint}});
  }
  std::vector<ConfigProblem> problems;
  PipelineState state = state_from(root, origin, problems);
  if (!problems.empty()) throw ConfigError(std::move(problems));
  return state;
}

std::vector<PipelineState> parse_pipeline_states(std::string_view text, const std::string& origin) {
  const YAML::Node root = load_state_text(text, origin);
  const std::string format = format_of(root);
  if (format == "ferry-state") return {parse_pipeline_state(text, origin)};
  if (format != "ferry-states") {
    throw ConfigError({{at(origin, root), "format",
                        "not a saved pipeline state (expected \"format\": \"ferry-state\", or \"ferry-states\" for "
                        "a group of devices)"}});
  }
  std::vector<ConfigProblem> problems;
  unknown_keys(root, {"format", "version", "devices"}, origin, "", problems);
  const std::optional<YAML::Node> version = child(root, "version");
  if (!version || whole_number(version) != std::optional<uint64_t>(1)) {
    problems.push_back({at(origin, version ? *version : root), "version", "expected 1 (this ferry's state format)"});
  }
  std::vector<PipelineState> states;
  const std::optional<YAML::Node> devices = child(root, "devices");
  if (!devices || !devices->IsSequence() || devices->size() == 0) {
    problems.push_back({at(origin, devices ? *devices : root), "devices",
                        "expected a list of states (\"format\": \"ferry-state\"), one per device"});
  } else {
    for (size_t d = 0; d < devices->size(); ++d) {
      const YAML::Node node = (*devices)[d];
      const std::string prefix = "devices[" + std::to_string(d) + "].";
      std::vector<ConfigProblem> found;
      if (format_of(node) != "ferry-state") {
        found.push_back({at(origin, node), "format", "expected \"format\": \"ferry-state\""});
      } else {
        states.push_back(state_from(node, origin, found));
      }
      for (ConfigProblem& problem : found) {
        problem.key.insert(0, prefix);
        problems.push_back(std::move(problem));
      }
    }
  }
  // A group's devices take every step together: their states name one step. Found here, naming the
  // device, rather than when the resumed run's devices deliver different batches.
  if (problems.empty()) {
    const auto step = [](const PipelineState& state) {
      return state.next
                 ? "batch " + std::to_string(state.next->index) + " of epoch " + std::to_string(state.next->epoch)
                 : "batch " + std::to_string(state.next_batch) + " of the run";
    };
    for (size_t d = 1; d < states.size(); ++d) {
      const bool same_cursor = !states[d].next == !states.front().next &&
                               (!states[d].next || (states[d].next->epoch == states.front().next->epoch &&
                                                    states[d].next->index == states.front().next->index));
      if (states[d].next_batch != states.front().next_batch || !same_cursor) {
        const YAML::Node node = (*devices)[d];
        problems.push_back(
            {at(origin, child(node, "next_batch").value_or(node)), "devices[" + std::to_string(d) + "].next_batch",
             "device " + std::to_string(d) + " is at " + step(states[d]) + " but device 0 at " + step(states.front()) +
                 ": the devices of a group take every step together, so a state ferry saved has "
                 "them all at one (was the file edited, or pieced together from two runs?)"});
      }
    }
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));
  return states;
}

PipelineState load_pipeline_state(const std::string& path) {
  // A saved state is a few hundred bytes of JSON; 1 MiB refuses the wrong file before reading it all.
  return parse_pipeline_state(read_text_file(path, size_t{1} << 20, "saved pipeline state"), path);
}

std::vector<PipelineState> load_pipeline_states(const std::string& path) {
  return parse_pipeline_states(read_text_file(path, size_t{1} << 20, "saved pipeline state"), path);
}

void check_resume_state(const PipelineState& state, const EngineOptions& options, const Sampler& sampler) {
  struct {
    uint64_t batch_size, epoch_samples, batches_per_epoch, epochs, max_batches;
    bool drop_last, refill;
  } run{};
  run.batch_size = std::max<uint64_t>(options.batch_size, 1);
  run.epoch_samples = sampler.epoch_size();
  run.batches_per_epoch = options.drop_last ? run.epoch_samples / run.batch_size
                                            : (run.epoch_samples + run.batch_size - 1) / run.batch_size;
  run.epochs = options.epochs;
  run.max_batches = options.max_batches;
  run.drop_last = options.drop_last;
  run.refill = options.refills();
  const std::string origin = state.origin.empty() ? "the saved state" : state.origin;
  std::vector<ConfigProblem> problems;
  const auto refuse = [&](const std::string& key, const std::string& message) {
    problems.push_back({origin, key, message});
  };
  const auto text = [](uint64_t value) { return std::to_string(value); };
  const uint64_t per_epoch = run.batches_per_epoch;
  const uint64_t run_batches = saturating_product(run.epochs, per_epoch);
  if (run.max_batches != 0 && state.next_batch > run.max_batches) {
    refuse("next_batch", text(state.next_batch) + " is past max_batches (" + text(run.max_batches) +
                             "): the saved run cannot have delivered that many");
  } else if (state.next_batch > run_batches) {
    refuse("next_batch", text(state.next_batch) + " is past the " + text(run_batches) + " batches of this run (" +
                             text(run.epochs) + " epochs of " + text(per_epoch) + ")");
  }
  if (state.next) {
    const BatchCursor& next = *state.next;
    // Whether all ranks together took other samples than this rank's position says: a run resumed on
    // another number of ranks, dealing the rest of its first epoch (Note [resuming on other ranks]);
    // resume_on_ranks() checks where such a position must be.
    const bool anchored = state.consumed && next.position <= run.epoch_samples &&
                          *state.consumed != sampler.consumed_before(next.epoch, next.position);
    // Where batch next.index starts without skips: index x batch_size, or the end of what the epoch
    // plans (all its samples; under drop_last only whole batches).
    const uint64_t planned = run.drop_last ? saturating_product(per_epoch, run.batch_size) : run.epoch_samples;
    const uint64_t earliest = std::min(saturating_product(next.index, run.batch_size), planned);
    if (next.epoch > run.epochs) {
      refuse("next.epoch", text(next.epoch) + " is beyond the " + text(run.epochs) + " epochs this config runs");
    } else if (next.epoch == run.epochs && (next.index != 0 || next.position != 0)) {
      refuse("next.epoch", text(next.epoch) + " is the end of this config's " + text(run.epochs) +
                               " epochs, but next.batch and next.position are not 0");
    } else if (next.index > per_epoch) {
      refuse("next.batch", text(next.index) + " is past the " + text(per_epoch) + " batches of an epoch");
    } else if (next.position > run.epoch_samples) {
      refuse("next.position", text(next.position) + " is past the " + text(run.epoch_samples) +
                                  " samples of an epoch (this rank's share)");
    } else if (!anchored && !run.refill && next.epoch < run.epochs && next.position != earliest) {
      // Without on_error: skip every batch takes exactly batch_size positions. (A cursor at the end of
      // an epoch, next.batch = its batches, means the next epoch's start.)
      refuse("next.position", text(next.position) + " does not fit next.batch " + text(next.index) + ": batch " +
                                  text(next.index) + " of batches of " + text(run.batch_size) + " starts at " +
                                  text(earliest));
    } else if (run.refill && next.position < earliest) {
      refuse("next.position", text(next.position) + " is before where batch " + text(next.index) + " can start (" +
                                  text(earliest) + ": batches of " + text(run.batch_size) + ")");
    } else {
      // Batches before this epoch's: exactly epoch x per_epoch without skips, at most that with them
      // (skips shorten epochs).
      const uint64_t most = saturating_product(next.epoch, per_epoch) + next.index;
      if (!run.refill && state.next_batch != most) {  // resumed on other ranks too: counted as these ranks do
        refuse("next_batch", text(state.next_batch) + " does not fit next (epoch " + text(next.epoch) + ", batch " +
                                 text(next.index) + "): with " + text(per_epoch) + " batches an epoch it is " +
                                 text(most));
      } else if (run.refill && (state.next_batch > most || state.next_batch < next.index)) {
        refuse("next_batch", text(state.next_batch) + " does not fit next (epoch " + text(next.epoch) + ", batch " +
                                 text(next.index) + "): it must be between " + text(next.index) + " and " + text(most));
      }
    }
  }
  if (state.last_epoch.has_value() != state.last_index.has_value()) {
    refuse("last_delivered", "needs both epoch and batch");
  } else if (state.last_epoch) {
    if (state.next_batch == 0) refuse("last_delivered", "is set, but next_batch is 0 (nothing was delivered)");
    if (*state.last_index >= per_epoch) {
      refuse("last_delivered.batch",
             text(*state.last_index) + " is past the " + text(per_epoch) + " batches of an epoch");
    }
    if (state.next) {
      const BatchCursor& next = *state.next;
      const bool same_epoch = *state.last_epoch == next.epoch && *state.last_index + 1 == next.index;
      const bool epoch_after = *state.last_epoch < next.epoch && next.index == 0;
      if (!same_epoch && !epoch_after) {
        refuse("last_delivered", "epoch " + text(*state.last_epoch) + ", batch " + text(*state.last_index) +
                                     " is not the batch before next (epoch " + text(next.epoch) + ", batch " +
                                     text(next.index) + ")");
      }
    }
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));
}

}  // namespace ferry
