#include "python_pipeline.h"

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

#include <torch/csrc/autograd/python_variable.h>

#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/assembly/configured_planner.h>
#include <ferry/assembly/pipeline_state_loader.h>
#include <ferry/build_config.h>
#if FERRY_WITH_GPU
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif
#include <ferry/assembly/run_report.h>

namespace py = pybind11;

namespace ferry::python {
namespace {

// ferry.Batch (python/ferry/batch.py), which the package registers at import (_set_batch_type).
// Never destroyed: static destructors may run after the interpreter is gone.
py::object* g_batch_type = nullptr;

// A ferry.Batch of `batch`'s own tensors: a dict subclass, filled through the C API, with the
// batch's place as attributes and its sample indices as raw uint64 bytes (turned into a list only
// when asked for), and `key_of`, which turns them into the samples' keys when asked. A list field
// (collate.lists) is a Python list of its samples' tensors. Call with the GIL held.
py::object batch_to_python(const Batch& batch, const py::object& key_of) {
  static PyObject* const epoch_name = PyUnicode_InternFromString("epoch");
  static PyObject* const index_name = PyUnicode_InternFromString("index");
  static PyObject* const sequence_name = PyUnicode_InternFromString("sequence");
  static PyObject* const indices_name = PyUnicode_InternFromString("_sample_indices");
  static PyObject* const key_of_name = PyUnicode_InternFromString("_key_of");
  if (g_batch_type == nullptr) throw std::logic_error("ferry._C: the package did not register ferry.Batch");
  py::object out = (*g_batch_type)();
  const std::vector<std::string>& names = batch.names();
  const auto wrap = [](const at::Tensor& tensor) {
    // torch's own wrapper: the Python tensor shares the C++ tensor's storage (no copy, no DLPack).
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(tensor));
  };
  for (size_t i = 0; i < names.size(); ++i) {
    py::object value;
    if (const std::vector<at::Tensor>* views = batch.list_at(i)) {
      py::list list(views->size());
      for (size_t s = 0; s < views->size(); ++s) list[s] = wrap((*views)[s]);
      value = std::move(list);
    } else {
      value = wrap(batch.tensors()[i]);
    }
    if (PyDict_SetItem(out.ptr(), py::str(names[i]).ptr(), value.ptr()) != 0) throw py::error_already_set();
  }
  const std::vector<uint64_t>& indices = batch.sample_indices();
  const std::pair<PyObject*, py::object> attributes[] = {
      {epoch_name, py::int_(batch.epoch())},
      {index_name, py::int_(batch.index())},
      {sequence_name, py::int_(batch.sequence())},
      {indices_name, py::bytes(reinterpret_cast<const char*>(indices.data()), indices.size() * sizeof(uint64_t))},
      {key_of_name, key_of}};
  for (const auto& [name, value] : attributes) {
    if (PyObject_SetAttr(out.ptr(), name, value.ptr()) != 0) throw py::error_already_set();
  }
  return out;
}

}  // namespace

PythonPipeline::PythonPipeline(Config config, const std::optional<std::string>& state_json)
    : config_(std::move(config)) {
  std::vector<PipelineState> resume;
  if (state_json) resume = parse_pipeline_states(*state_json, "<state_dict>");
  py::gil_scoped_release unlocked;  // indexing a dataset and starting threads take a while
  source_ = check_config(config_);
  source_description_ = source_->describe();
  install(build(resume));
}

PythonPipeline::~PythonPipeline() {
  // Joining the pipeline's threads needs no Python; other Python threads may run meanwhile. The
  // destructor runs with the GIL held when Python drops the last reference, and without it when the
  // interpreter has gone.
  std::shared_ptr<PipelineGroup> pipeline;
  {
    std::lock_guard lock(handle_);
    pipeline = std::move(pipeline_);
  }
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release unlocked;
    pipeline.reset();
    source_.reset();  // a python source's workers are stopped and reaped
  }
}

std::shared_ptr<PipelineGroup> PythonPipeline::build(const std::vector<PipelineState>& resume) const {
  return std::make_shared<PipelineGroup>(make_pipeline_group(config_, source_, resume));
}

std::shared_ptr<PipelineGroup> PythonPipeline::install(std::shared_ptr<PipelineGroup> pipeline) {
  // Every device's pipeline plans as many batches: the first one's planner counts the group's steps.
  BatchPlanner planner = planner_of(config_, pipeline->pipeline(0).options(), *source_, 0);
  std::string device = pipeline->pipeline(0).options().device;
  for (size_t d = 1; d < pipeline->size(); ++d) device += "," + pipeline->pipeline(d).options().device;
  std::lock_guard lock(handle_);
  planner_.emplace(std::move(planner));
  pending_epoch_.reset();
  device_ = std::move(device);
  final_state_.reset();
  final_stats_.reset();
  std::swap(pipeline_, pipeline);
  return pipeline;
}

void PythonPipeline::retire(std::shared_ptr<PipelineGroup> pipeline) {
  if (!pipeline) return;
  pipeline->close();                    // wakes a next() blocked on another thread
  std::lock_guard consumer(consumer_);  // that next() has left the pipeline
  pending_.reset();                     // a batch of the pipeline retired, not of the new one
  pipeline.reset();                     // the last reference, unless a next() still holds one: it drops it on return
}

uint64_t PythonPipeline::length() const {
  std::lock_guard lock(handle_);
  return planner_ ? planner_->total_batches() : 0;
}

uint64_t PythonPipeline::first_epoch() const {
  std::lock_guard lock(handle_);
  return planner_ ? planner_->first_epoch() : 0;
}

uint64_t PythonPipeline::epochs() const { return config_.pipeline.epochs; }

uint64_t PythonPipeline::epoch_length(uint64_t epoch) const {
  std::lock_guard lock(handle_);
  return planner_ ? planner_->batches_in_epoch(epoch) : 0;
}

std::string PythonPipeline::device() const {
  std::lock_guard lock(handle_);
  return device_;
}

std::shared_ptr<PipelineGroup> PythonPipeline::running() const {
  std::lock_guard lock(handle_);
  return pipeline_;
}

py::object PythonPipeline::to_python(const BatchGroup& step) const {
  std::shared_ptr<const Source> source;
  {
    std::lock_guard lock(handle_);
    source = source_;
  }
  if (!key_of_ || key_source_.lock() != source) {
    // The samples' keys from their indices (raw uint64 bytes), for Batch.sample_keys. It holds the source
    // weakly: a batch kept after close() must not keep a python source's worker processes running.
    key_source_ = source;
    key_of_ = py::cpp_function([weak = std::weak_ptr<const Source>(source)](const py::bytes& raw) {
      const std::shared_ptr<const Source> alive = weak.lock();
      if (!alive) {
        throw Error(
            "ferry.Batch.sample_keys: the pipeline that made this batch was closed (or restarted): ask "
            "for a batch's keys before close()");
      }
      const std::string_view bytes = raw;
      std::vector<uint64_t> indices(bytes.size() / sizeof(uint64_t));
      std::memcpy(indices.data(), bytes.data(), indices.size() * sizeof(uint64_t));
      py::list keys(indices.size());
      for (size_t i = 0; i < indices.size(); ++i) keys[i] = py::str(alive->key(indices[i]));
      return keys;
    });
  }
  if (config_.devices.empty()) return batch_to_python(step[0], key_of_);
  py::list batches;
  for (const Batch& batch : step) batches.append(batch_to_python(batch, key_of_));
  return batches;
}

std::vector<std::string> PythonPipeline::class_names() const {
  std::lock_guard lock(handle_);
  if (!source_) throw Error("class_names of a closed pipeline");
  return source_->class_names();
}

std::optional<BatchGroup> PythonPipeline::take(std::unique_lock<std::mutex>& consumer) {
  for (;;) {
    const std::shared_ptr<PipelineGroup> pipeline = running();
    if (!pipeline) return std::nullopt;
    PipelineGroup::Next got = pipeline->next_for(kSignalPollInterval);
    if (!got.timed_out) return std::move(got.step);
    // Between two slices: let Python run its signal handlers (Ctrl-C raises KeyboardInterrupt).
    consumer.unlock();
    {
      py::gil_scoped_acquire locked;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    consumer.lock();
  }
}

py::object PythonPipeline::next(std::optional<uint64_t> epoch) {
  std::optional<BatchGroup> batch;
  {
    py::gil_scoped_release unlocked;
    std::unique_lock consumer(consumer_);
    for (;;) {
      if (pending_) {
        batch = std::move(pending_);
        pending_.reset();
        set_pending_epoch(std::nullopt);
        // Taken in an earlier loop, perhaps on another thread or with another current stream: ready
        // it on the stream current now, as the pipeline did for the stream current then.
        for (const Batch& one : *batch) one.ready_on_current_stream();
      } else {
        batch = take(consumer);
      }
      if (!batch || !epoch || batch->epoch() == *epoch) break;
      if (batch->epoch() > *epoch) {  // the epoch is over: this batch starts a later loop
        set_pending_epoch(batch->epoch());
        pending_ = std::move(batch);
        batch.reset();
        break;
      }
      // A batch of an earlier epoch, which a loop that stopped early left behind: a new loop is a new
      // epoch, as with torch's DataLoader, so it is dropped.
    }
  }
  if (!batch) return py::none();
  return to_python(*batch);
}

void PythonPipeline::set_pending_epoch(std::optional<uint64_t> epoch) {
  std::lock_guard lock(handle_);
  pending_epoch_ = epoch;
}

uint64_t PythonPipeline::drain() {
  py::gil_scoped_release unlocked;
  std::lock_guard consumer(consumer_);
  const std::shared_ptr<PipelineGroup> pipeline = running();
  uint64_t batches = pending_ ? 1 : 0;
  pending_.reset();
  set_pending_epoch(std::nullopt);
  if (pipeline) {
    for (const BatchGroup& step : *pipeline) {
      (void)step;
      ++batches;
    }
  }
  return batches;
}

py::dict PythonPipeline::train_in_cpp(uint64_t steps, double step_seconds, int64_t cycles) {
  using Clock = std::chrono::steady_clock;
  uint64_t done = 0;
  double waited = 0.0;
  double first_wait = 0.0;
  double dropped = 0.0;       // releasing the last step's batch
  std::vector<double> waits;  // each step's after the first, for the benchmark's percentiles
  waits.reserve(static_cast<size_t>(std::min<uint64_t>(steps, 1'000'000)));
  Clock::time_point start = Clock::now();
  {
    py::gil_scoped_release unlocked;
    std::lock_guard consumer(consumer_);
    const std::shared_ptr<PipelineGroup> pipeline = running();
    pending_.reset();
    set_pending_epoch(std::nullopt);
    std::optional<BatchGroup> step;
    while (pipeline && done < steps) {
      // Dropping the last step's batch is timed apart, as bench/overlap.py's Python loop does: a Python
      // loop drops it when it rebinds its loop variable, after its next().
      const auto dropping = Clock::now();
      step.reset();
      const auto asked = Clock::now();
      step = pipeline->next();
      const Batch* batch = step ? &(*step)[0] : nullptr;
      const double wait = std::chrono::duration<double>(Clock::now() - asked).count();
      if (!batch) break;
      // The first batch waits for the pipeline to start: reported apart, the loop is timed after it.
      if (done++ == 0) {
        first_wait = wait;
        start = Clock::now();
      } else {
        waited += wait;
        waits.push_back(wait);
        dropped += std::chrono::duration<double>(asked - dropping).count();
      }
#if FERRY_WITH_GPU
      if (batch->device().is_cuda()) {
        const c10::cuda::CUDAGuard on(batch->device());
        at::cuda::sleep(cycles);
        c10::cuda::getCurrentCUDAStream().synchronize();
        continue;
      }
#endif
      (void)cycles;
      std::this_thread::sleep_for(std::chrono::duration<double>(step_seconds));
    }
  }
  py::dict out;
  out["steps"] = done;
  out["loop_seconds"] = std::chrono::duration<double>(Clock::now() - start).count();
  out["wait_seconds"] = waited;
  out["first_wait_seconds"] = first_wait;
  out["waits"] = waits;
  out["drop_seconds"] = dropped;
  return out;
}

std::vector<PipelineState> PythonPipeline::delivered_state(std::vector<PipelineState> states) const {
  if (pending_epoch_) {
    // The step held back for the next loop was taken from the pipeline but not handed to Python:
    // the state starts at it. It is the first of its epoch (a loop ends where an epoch does), and
    // the step before it ended an epoch, so each device's batch starts at the epoch's first position.
    for (PipelineState& state : states) {
      state.next_batch -= 1;
      state.next = BatchCursor{*pending_epoch_, 0, 0};
      state.consumed = 0;
      state.last_epoch.reset();
      state.last_index.reset();
    }
  }
  return states;
}

std::string PythonPipeline::state_json() const {
  if (const std::shared_ptr<PipelineGroup> pipeline = running()) {
    std::vector<PipelineState> states = pipeline->state();
    std::lock_guard lock(handle_);
    return states_json(delivered_state(std::move(states)));
  }
  std::lock_guard lock(handle_);
  return final_state_ ? states_json(*final_state_) : PipelineState{}.to_json();
}

void PythonPipeline::load_state_json(const std::string& json) {
  const std::vector<PipelineState> states = parse_pipeline_states(json, "<state_dict>");
  py::gil_scoped_release unlocked;
  bool closed = false;
  {
    std::lock_guard lock(handle_);
    closed = source_ == nullptr;
  }
  if (closed) {  // made again (a python source's workers), outside handle_: it may take a while
    std::shared_ptr<const Source> source = check_config(config_);
    std::lock_guard lock(handle_);
    source_ = std::move(source);
  }
  // Built first: a state of another order throws here, with the running pipeline untouched.
  std::shared_ptr<PipelineGroup> fresh = build(states);
  retire(install(std::move(fresh)));
}

void PythonPipeline::cache_to(int device) {
  const std::shared_ptr<PipelineGroup> pipeline = running();
  if (!pipeline) throw Error("cache_to() on a closed pipeline");
  py::gil_scoped_release release;
  pipeline->cache_to(device);
}

std::string PythonPipeline::stats_json() const {
  std::vector<PipelineStats> devices;
  if (const std::shared_ptr<PipelineGroup> pipeline = running()) {
    devices = pipeline->stats();
  } else {
    std::lock_guard lock(handle_);
    if (final_stats_) devices = *final_stats_;
  }
  const PipelineStats stats = merged_stats(devices);
  RunInfo info;
  info.ferry_version = FERRY_VERSION;
  info.config = config_.origin;
  info.device = requested_devices(config_);  // as asked for; the report adds the resolved one
  info.source = source_description_;
  info.host = this_host();
  info.config_keys = config_.values;
  if (devices.size() > 1) info.devices = std::move(devices);
  std::ostringstream out;
  write_report_json(out, info, stats);
  return out.str();
}

void PythonPipeline::close() {
  py::gil_scoped_release unlocked;  // joining the threads takes a moment; Python may run meanwhile
  // The source goes too, also after a failure ended the run: a python source's worker processes end now,
  // not when Python collects this. Taken under handle_ (close() may run on two threads at once), dropped
  // outside it.
  std::shared_ptr<const Source> source;
  {
    std::lock_guard lock(handle_);
    source = std::move(source_);
  }
  if (!running()) return;
  std::shared_ptr<PipelineGroup> last;
  {
    std::lock_guard lock(handle_);
    if (!pipeline_) return;  // another close() got here first
    last = std::move(pipeline_);
  }
  last->close();                        // wakes a next() blocked on another thread
  std::lock_guard consumer(consumer_);  // that next() has left the pipeline: the state is final
  std::vector<PipelineState> state = last->state();
  std::vector<PipelineStats> stats = last->stats();
  {
    std::lock_guard lock(handle_);
    final_state_ = delivered_state(std::move(state));  // a held-back batch was never delivered
    pending_epoch_.reset();
    final_stats_ = std::move(stats);
  }
  pending_.reset();
  last.reset();  // joins the threads and frees the slabs, still without the GIL
}

bool PythonPipeline::closed() const { return running() == nullptr; }

namespace {

using Overrides = std::vector<std::string>;
using State = std::optional<std::string>;

std::unique_ptr<PythonPipeline> from_path(const std::string& path, const Overrides& overrides, const State& state) {
  Config config;
  {
    py::gil_scoped_release unlocked;
    config = load_config(path, overrides, OverrideOrigin::kProgram);
  }
  return std::make_unique<PythonPipeline>(std::move(config), state);
}

std::unique_ptr<PythonPipeline> from_text(const std::string& yaml, const std::string& origin,
                                          const Overrides& overrides, const State& state) {
  return std::make_unique<PythonPipeline>(parse_config(yaml, origin, overrides, OverrideOrigin::kProgram), state);
}

}  // namespace

void bind_pipeline(py::module_& module) {
  module.def(
      "_set_batch_type", [](py::object type) { g_batch_type = new py::object(std::move(type)); },
      "Registers ferry.Batch, the type next() returns (done by the package at import).");
  py::class_<PythonPipeline>(module, "Pipeline", "A running ferry pipeline (use ferry.Pipeline).")
      .def_static("from_path", &from_path, py::arg("path"), py::arg("overrides"), py::arg("state"))
      .def_static("from_text", &from_text, py::arg("yaml"), py::arg("origin"), py::arg("overrides"), py::arg("state"))
      .def("next", &PythonPipeline::next, py::arg("epoch") = py::none(),
           "The next batch (of `epoch` only, when given) as a ferry.Batch; None at the end.")
      .def("__len__", &PythonPipeline::length)
      .def_property_readonly("total_batches", &PythonPipeline::length)  // an int past len()'s 2^63 - 1
      .def_property_readonly("first_epoch", &PythonPipeline::first_epoch)
      .def_property_readonly("epochs", &PythonPipeline::epochs)
      .def("epoch_length", &PythonPipeline::epoch_length, py::arg("epoch"))
      .def("_drain_in_cpp", &PythonPipeline::drain,
           "Takes every remaining batch in C++; returns how many (a benchmark's baseline).")
      .def("_train_in_cpp", &PythonPipeline::train_in_cpp, py::arg("steps"), py::arg("step_seconds"), py::arg("cycles"),
           "A simulated training loop in C++ (bench/overlap.py).")
      .def("state_json", &PythonPipeline::state_json)
      .def("load_state_json", &PythonPipeline::load_state_json, py::arg("state"))
      .def("stats_json", &PythonPipeline::stats_json)
      .def("cache_to", &PythonPipeline::cache_to, py::arg("device"))
      .def("close", &PythonPipeline::close)
      .def_property_readonly("closed", &PythonPipeline::closed)
      .def_property_readonly("device", &PythonPipeline::device)
      .def_property_readonly("class_names", &PythonPipeline::class_names)
      .def_property_readonly("origin", &PythonPipeline::origin);
}

}  // namespace ferry::python
