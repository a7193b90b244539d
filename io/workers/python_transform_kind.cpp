// The `python` sample transform: a function of the user's that takes a sample's fields as a dict of numpy
// arrays and returns the fields it makes or changes, run by worker processes (Note [Python workers]).
#include <atomic>
#include <mutex>

#include "ferry/io/transforms/builtin_transforms.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/io/workers/python_code.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

using Type = KeySpec::Type;
using detail::WorkerCall;
using detail::PythonRunner;

class PythonTransform : public Transform {
 public:
  PythonTransform(const KeyValue& keys, MakeContext context) : context_(std::move(context)) {
    target_ = keys.at("python").text();
    args_ = keys.has("args") ? detail::json_value(keys.at("args")) : "{}";
    if (const KeyValue* fields = keys.find("fields")) declared_ = detail::declared_fields(*fields);
    if (const KeyValue* drop = keys.find("drop")) {
      for (const KeyValue& name : drop->items()) drop_.push_back(name.text());
    }
    same_every_epoch_ = keys.boolean_or("same_every_epoch", false);
  }

  std::string_view name() const override { return "python"; }
  bool same_every_epoch() const override { return same_every_epoch_; }

  std::optional<UserCodeStats> user_code() const override {
    const std::string what = "python transform '" + target_ + "'";
    if (const PythonRunner* runner = started_runner_.load(std::memory_order_acquire)) return runner->stats(what);
    UserCodeStats none;  // not started: no sample reached it yet
    none.what = what;
    none.processes = context_.workers;
    return none;
  }

  std::vector<FieldSpec> output_fields(const std::vector<FieldSpec>& input) const override {
    inputs_ = input;
    std::vector<FieldSpec> out = input;
    for (const FieldSpec& field : declared_) {
      auto same = std::find_if(out.begin(), out.end(), [&](const FieldSpec& f) { return f.name == field.name; });
      if (same != out.end()) {
        *same = field;
      } else {
        out.push_back(field);
      }
    }
    for (const std::string& name : drop_) {
      auto found = std::find_if(out.begin(), out.end(), [&](const FieldSpec& f) { return f.name == name; });
      if (found == out.end()) throw Error("drop names '" + name + "', which the sample does not have");
      out.erase(found);
    }
    capacity_ = detail::slot_bytes(declared_).value_or(0) + detail::kSlotAlignment;
    return out;
  }

  void apply(SampleFields& sample, const SampleContext& context) const override {
    PythonRunner& runner = this->runner();
    WorkerCall call;
    call.op = WorkerCall::Op::kTransform;
    call.index = context.index;
    call.epoch = context.epoch;
    call.stop = context.stop;
    uint64_t bytes = 0;
    for (size_t i = 0; i < sample.names().size(); ++i) {
      call.inputs.emplace_back(sample.names()[i], sample.tensors()[i]);
      bytes = detail::slot_aligned(bytes) + sample.tensors()[i].nbytes();
    }
    call.capacity = std::max(capacity_.load(std::memory_order_relaxed), bytes + detail::kSlotAlignment);
    detail::NamedTensors made = runner.call(call, std::string(context.key));
    uint64_t used = 0;
    for (auto& [field, tensor] : made) {
      used = detail::slot_aligned(used) + tensor.nbytes();
      sample.set(field, std::move(tensor));
    }
    for (const std::string& field : drop_) sample.erase(field);
    detail::remember_largest(capacity_, used);
  }

 private:
  /// The workers, started by the first sample: a transform is made more than once while a config is
  /// checked, and only the running pipeline's needs processes.
  PythonRunner& runner() const {
    std::call_once(started_, [&] {
      try {
        std::string json = "\"role\": \"transform\", \"target\": " + detail::json_string(target_) +
                           ", \"args\": " + args_ + ", \"inputs\": " + detail::json_fields(inputs_) +
                           ", \"fields\": " + detail::json_fields(declared_) + ", \"drop\": [";
        for (size_t i = 0; i < drop_.size(); ++i) json += (i > 0 ? ", " : "") + detail::json_string(drop_[i]);
        json += "]";
        runner_ = detail::make_python_runner(
            detail::worker_setup(context_, "transform '" + target_ + "'", json, ""), context_.workers);
        started_runner_.store(runner_.get(), std::memory_order_release);
      } catch (...) {
        start_error_ = std::current_exception();
      }
    });
    if (start_error_) std::rethrow_exception(start_error_);
    return *runner_;
  }

  MakeContext context_;
  std::string target_;
  std::string args_;
  std::vector<FieldSpec> declared_;
  std::vector<std::string> drop_;
  bool same_every_epoch_ = false;
  mutable std::vector<FieldSpec> inputs_;  // set by output_fields(), before any sample
  mutable std::atomic<uint64_t> capacity_{0};
  mutable std::once_flag started_;
  mutable std::unique_ptr<PythonRunner> runner_;
  mutable std::atomic<const PythonRunner*> started_runner_{nullptr};  // runner_, for user_code() once set
  mutable std::exception_ptr start_error_;
};

void check_python_transform(const KeyValue& keys, KeyProblems& problems) {
  const KeyValue& function = keys.at("python");
  const std::string& target = function.text();
  const size_t colon = target.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == target.size() ||
      target.find_first_of(" \t/") != std::string::npos) {
    problems.add(function, "expected 'package.module:function' (a function of an importable module), found '" +
                               target + "'");
  }
  if (const KeyValue* fields = keys.find("fields")) detail::check_declared_fields(*fields, problems);
}

}  // namespace

namespace detail {

TransformKind python_transform_kind() {
  TransformKind kind;
  kind.name = "python";
  kind.description =
      "A function of your own in Python: it gets the sample as a dict of numpy arrays (read-only) and returns a "
      "dict of the fields it makes or changes (numpy arrays, CPU torch tensors, numbers or bytes); fields it does "
      "not return pass through. Worker processes (decode.workers) run it. ferry.sample_rng() gives it random "
      "numbers that repeat on every run and after a resume.";
  kind.keys = {
      {.name = "python",
       .type = Type::kString,
       .description = "The function, as 'package.module:function'; with `args`, called as function(sample, **args).",
       .default_value = "required",
       .required = true,
       .example = "my_data.transforms:flip",
       .min = 1,
       .expected = "'package.module:function'",
       .missing = "the function, as 'package.module:function'"},
      {.name = "args",
       .type = Type::kAny,
       .description = "Keyword arguments for the function, as a mapping.",
       .default_value = "{}",
       .example = "{probability: 0.5}"},
      detail::fields_key("The fields the function makes or changes (dtype or shape), in order; fields it returns "
                         "unchanged in kind need no entry."),
      {.name = "drop",
       .type = Type::kList,
       .description = "Fields removed after the function.",
       .default_value = "[]",
       .example = "[caption]",
       .item = {{.name = "", .type = Type::kString, .min = 1, .expected = "a field name"}},
       .one_or_list = true,
       .expected = "a list of field names",
       .type_text = "list of field names"},
      {.name = "same_every_epoch",
       .type = Type::kBoolean,
       .description = "Whether a sample comes out the same in every epoch (no random numbers drawn per epoch): "
                      "then the dataset cache may keep it.",
       .default_value = "false",
       .example = "true"},
  };
  kind.make_in = [](const KeyValue& keys, const MakeContext& context) -> std::shared_ptr<const Transform> {
    return std::make_shared<PythonTransform>(keys, context);
  };
  kind.check = check_python_transform;
  return kind;
}

}  // namespace detail
}  // namespace ferry
