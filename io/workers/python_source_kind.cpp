// The `python` source kind: a map-style dataset of the user's (`__len__`, `__getitem__` returning a dict of
// arrays), run by worker processes that write each sample into shared memory (Note [Python workers]).
#include <atomic>
#include <sstream>

#include "ferry/io/formats/builtin_source_kinds.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/io/workers/python_code.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

using Type = KeySpec::Type;
using detail::PythonRunner;
using detail::WorkerCall;

// A slot's size when the fields do not bound it (a variable-length field without max_length): the
// worker asks for more when a sample needs it, and later samples start from the largest seen.
constexpr uint64_t kFirstSlotBytes = uint64_t{64} << 10;

class PythonSource : public Source {
 public:
  PythonSource(std::unique_ptr<PythonRunner> runner, uint64_t length, std::vector<FieldSpec> fields, std::string what,
               bool same_every_epoch)
      : runner_(std::move(runner)),
        length_(length),
        fields_(std::move(fields)),
        what_(std::move(what)),
        same_every_epoch_(same_every_epoch) {
    capacity_ = detail::slot_bytes(fields_).value_or(kFirstSlotBytes);
  }

  const std::vector<FieldSpec>& fields() const override { return fields_; }
  uint64_t size() const override { return length_; }
  EncodedSample read(uint64_t index) const override { return read_sample(index, SampleContext{.index = index}); }

  EncodedSample read_sample(uint64_t index, const SampleContext& context) const override {
    SampleContext sample = context;
    sample.index = index;
    std::vector<ReadResult> read = read_samples({sample});
    if (read.front().error) std::rethrow_exception(read.front().error);
    return std::move(read.front().sample);
  }

  // A group's samples in one request to a worker process (WorkerPool::call_many()); on the decode threads a
  // call costs no round trip.
  bool reads_in_groups() const override { return runner_->processes() > 0; }

  std::vector<ReadResult> read_samples(const std::vector<SampleContext>& contexts) const override {
    std::vector<WorkerCall> calls(contexts.size());
    std::vector<std::string> keys(contexts.size());
    const uint64_t capacity = capacity_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < contexts.size(); ++i) {
      WorkerCall& call = calls[i];
      call.op = WorkerCall::Op::kMake;
      call.index = contexts[i].index;
      call.epoch = contexts[i].epoch;
      call.capacity = capacity;
      call.stop = contexts[i].stop;
      keys[i] = "dataset[" + std::to_string(call.index) + "]";
    }
    std::vector<detail::CallResult> made = runner_->call_many(calls, keys);
    std::vector<ReadResult> read(contexts.size());
    for (size_t i = 0; i < contexts.size(); ++i) {
      if (made[i].error) {
        read[i].error = std::move(made[i].error);
        continue;
      }
      EncodedSample& sample = read[i].sample;
      sample.index = calls[i].index;
      sample.key = std::move(keys[i]);
      sample.fields.reserve(made[i].fields.size());
      uint64_t used = 0;
      for (auto& [name, tensor] : made[i].fields) {
        used = detail::slot_aligned(used) + tensor.nbytes();
        sample.fields.push_back(std::move(tensor));
      }
      // Later samples get a slot as large as the largest so far, so that few need a second one.
      detail::remember_largest(capacity_, used);
    }
    return read;
  }

  bool same_every_epoch() const override { return same_every_epoch_; }
  std::optional<UserCodeStats> user_code() const override { return runner_->stats("python " + what_); }

  std::string key(uint64_t index) const override { return "dataset[" + std::to_string(index) + "]"; }
  std::string describe() const override {
    return "python(" + what_ + ", " + std::to_string(length_) + " samples, " + runner_->where() + ")";
  }

 private:
  std::unique_ptr<PythonRunner> runner_;
  uint64_t length_;
  std::vector<FieldSpec> fields_;
  std::string what_;
  bool same_every_epoch_;
  mutable std::atomic<uint64_t> capacity_;
};

// The greeting of ferry/_worker.py's dataset role: "length N", then "field\tNAME\tDTYPE\tDIMS\tMAX" lines.
void read_greeting(const std::string& greeting, uint64_t& length, std::vector<FieldSpec>& fields) {
  std::istringstream lines(greeting);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("length ")) {
      length = std::stoull(line.substr(7));
    } else if (line.starts_with("field\t")) {
      std::istringstream parts(line.substr(6));
      std::string name, dtype, dims, max_length;
      std::getline(parts, name, '\t');
      std::getline(parts, dtype, '\t');
      std::getline(parts, dims, '\t');
      std::getline(parts, max_length, '\t');
      FieldSpec field;
      field.name = name;
      field.dtype = parse_dtype(dtype);
      std::istringstream sizes(dims);
      std::string size;
      while (std::getline(sizes, size, ',')) {
        if (!size.empty()) field.shape.push_back(std::stoll(size));
      }
      if (max_length != "-" && !max_length.empty()) field.max_length = std::stoll(max_length);
      fields.push_back(std::move(field));
    }
  }
}

std::shared_ptr<const Source> make_python_source(const KeyValue& source, const MakeContext& context) {
  const std::string target = source.at("dataset").text();
  std::string json = "\"role\": \"dataset\"";
  std::string payload;
  std::string what;
  if (detail::is_object_handle(target)) {
    std::optional<detail::HeldObject> held = detail::held_object(target);
    if (!held) {
      throw Error("the dataset " + target + " is no longer held: its ferry.Pipeline was closed; make a new one");
    }
    payload = std::move(held->payload);
    what = "dataset " + held->description;
    json += ", \"object\": true";
  } else {
    what = "dataset '" + target + "'";
    json += ", \"target\": " + detail::json_string(target);
    json += ", \"args\": " + (source.has("args") ? detail::json_value(source.at("args")) : std::string("{}"));
  }
  std::vector<FieldSpec> declared;
  if (const KeyValue* fields = source.find("fields")) declared = detail::declared_fields(*fields);
  detail::WorkerSetup setup = detail::worker_setup(
      context, what, json + ", \"fields\": " + (declared.empty() ? std::string("null") : detail::json_fields(declared)),
      std::move(payload));
  if (declared.empty()) {
    // The first worker infers the fields from the first samples; the others are told them.
    setup.after_first = [json, seed = context.seed](const std::string& greeting) {
      uint64_t length = 0;
      std::vector<FieldSpec> inferred;
      read_greeting(greeting, length, inferred);
      return "{\"seed\": " + std::to_string(seed) + ", " + json + ", \"fields\": " + detail::json_fields(inferred) +
             "}";
    };
  }
  std::unique_ptr<PythonRunner> runner = detail::make_python_runner(std::move(setup), context.workers);
  uint64_t length = 0;
  std::vector<FieldSpec> fields;
  read_greeting(runner->greeting(), length, fields);
  if (length == 0) throw Error(what + " is empty (its len() is 0)");
  return std::make_shared<PythonSource>(std::move(runner), length, declared.empty() ? fields : declared, what,
                                        source.boolean_or("same_every_epoch", false));
}

void check_python_source(const KeyValue& source, KeyProblems& problems) {
  const KeyValue& dataset = source.at("dataset");
  const std::string& target = dataset.text();
  if (!detail::is_object_handle(target)) {
    const size_t colon = target.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == target.size() ||
        target.find_first_of(" \t/") != std::string::npos) {
      problems.add(dataset,
                   "expected 'package.module:factory' (a class or function of an importable module that "
                   "makes the dataset), found '" +
                       target + "'");
    }
  }
  if (const KeyValue* fields = source.find("fields")) detail::check_declared_fields(*fields, problems);
}

}  // namespace

namespace detail {

SourceKind python_source_kind() {
  SourceKind kind;
  kind.name = "python";
  kind.description =
      "A map-style dataset of your own in Python: an object with __len__ and __getitem__(index) returning a dict "
      "of numpy arrays, CPU torch tensors, numbers or bytes. Worker processes (decode.workers) run it and write "
      "each sample straight into memory that ferry packs from. From Python, ferry.Pipeline.from_dataset() hands "
      "over a dataset object instead (docs/python-data.md).";
  kind.keys = {
      {.name = "dataset",
       .type = Type::kString,
       .description = "What makes the dataset: 'package.module:factory', a class or function that the workers "
                      "import and call with `args`.",
       .default_value = "required",
       .required = true,
       .example = "my_data.datasets:make_train",
       .min = 1,
       .expected = "'package.module:factory'",
       .missing = "what makes the dataset, as 'package.module:factory'"},
      {.name = "args",
       .type = Type::kAny,
       .description = "Keyword arguments for the factory, as a mapping.",
       .default_value = "{}",
       .example = "{root: /data/train, size: 224}"},
      {.name = "same_every_epoch",
       .type = Type::kBoolean,
       .description = "Whether __getitem__ makes a sample the same in every epoch (it draws no random numbers "
                      "per epoch): then the dataset cache may keep it.",
       .default_value = "false",
       .example = "true"},
      detail::fields_key(
          "The fields of each sample, in order; inferred from the first samples when left out "
          "(Python ints as int64, floats as float32; a field of bytes needs its max_length declared), then "
          "checked on every sample."),
  };
  kind.make_in = make_python_source;
  kind.check = check_python_source;
  kind.fields = [](const KeyValue& source) -> std::vector<FieldSpec> {
    const KeyValue* fields = source.find("fields");
    return fields != nullptr ? detail::declared_fields(*fields) : std::vector<FieldSpec>{};
  };
  kind.order = [](const KeyValue& source, const Source& made) {
    std::map<std::string, std::string> order;
    const std::string& target = source.at("dataset").text();
    if (detail::is_object_handle(target)) {
      // A handle's number differs from run to run; what it holds, with the dataset's size, does not.
      const std::string description = made.describe();
      order["source.dataset"] = description.substr(0, description.rfind(", "));
    } else {
      order["source.dataset"] = target;
      if (const KeyValue* args = source.find("args")) order["source.args"] = args->yaml();
    }
    if (const KeyValue* fields = source.find("fields")) order["source.fields"] = fields->yaml();
    return order;
  };
  kind.error_key = "source.dataset";
  return kind;
}

}  // namespace detail
}  // namespace ferry
