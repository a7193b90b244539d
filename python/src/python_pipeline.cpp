#include "python_pipeline.h"

#include <sstream>
#include <utility>

#include <torch/csrc/autograd/python_variable.h>

#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/assembly/pipeline_state_loader.h>
#include <ferry/build_config.h>
#include <ferry/stages/standard_pipeline.h>
#include "cli/run_report.h"

namespace py = pybind11;

namespace ferry::python {

PythonPipeline::PythonPipeline(Config config, const std::optional<std::string>& state_json)
    : config_(std::move(config)) {
  std::optional<PipelineState> resume;
  if (state_json) resume = parse_pipeline_state(*state_json, "<state_dict>");
  py::gil_scoped_release unlocked;  // indexing a dataset and starting threads take a while
  source_ = check_config(config_);
  install(build(resume));
}

PythonPipeline::~PythonPipeline() {
  // Joining the pipeline's threads needs no Python; other Python threads may run meanwhile. The
  // destructor runs with the GIL held when Python drops the last reference, and without it when the
  // interpreter has gone.
  std::shared_ptr<Pipeline> pipeline;
  {
    std::lock_guard lock(handle_);
    pipeline = std::move(pipeline_);
  }
  if (pipeline && Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release unlocked;
    pipeline.reset();
  }
}

std::shared_ptr<Pipeline> PythonPipeline::build(const std::optional<PipelineState>& resume) const {
  return std::make_shared<Pipeline>(make_pipeline(config_, source_, resume));
}

std::shared_ptr<Pipeline> PythonPipeline::install(std::shared_ptr<Pipeline> pipeline) {
  const uint64_t planned = planned_batches(config_, pipeline->options(), *source_);
  std::lock_guard lock(handle_);
  planned_ = planned;
  device_ = pipeline->options().device;
  final_state_.reset();
  final_stats_.reset();
  std::swap(pipeline_, pipeline);
  return pipeline;
}

void PythonPipeline::retire(std::shared_ptr<Pipeline> pipeline) {
  if (!pipeline) return;
  pipeline->close();                    // wakes a next() blocked on another thread
  std::lock_guard consumer(consumer_);  // that next() has left the pipeline
  pipeline.reset();                     // the last reference, unless a next() still holds one: it drops it on return
}

uint64_t PythonPipeline::length() const {
  std::lock_guard lock(handle_);
  return planned_;
}

std::string PythonPipeline::device() const {
  std::lock_guard lock(handle_);
  return device_;
}

std::shared_ptr<Pipeline> PythonPipeline::running() const {
  std::lock_guard lock(handle_);
  return pipeline_;
}

py::dict PythonPipeline::next() {
  std::optional<Batch> batch;
  {
    py::gil_scoped_release unlocked;
    std::unique_lock consumer(consumer_);
    for (;;) {
      const std::shared_ptr<Pipeline> pipeline = running();
      if (!pipeline) break;
      Pipeline::Next got = pipeline->next_for(kSignalPollInterval);
      if (!got.timed_out) {
        batch = std::move(got.batch);
        break;
      }
      // Between two slices: let Python run its signal handlers (Ctrl-C raises KeyboardInterrupt).
      consumer.unlock();
      {
        py::gil_scoped_acquire locked;
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      }
      consumer.lock();
    }
  }
  if (!batch) throw py::stop_iteration();
  py::dict fields;
  const std::vector<std::string>& names = batch->names();
  for (size_t i = 0; i < names.size(); ++i) {
    // torch's own wrapper: the Python tensor shares the C++ tensor's storage (no copy, no DLPack).
    fields[py::str(names[i])] = py::reinterpret_steal<py::object>(THPVariable_Wrap(batch->tensors()[i]));
  }
  return fields;
}

uint64_t PythonPipeline::drain() {
  py::gil_scoped_release unlocked;
  std::lock_guard consumer(consumer_);
  const std::shared_ptr<Pipeline> pipeline = running();
  uint64_t batches = 0;
  if (pipeline) {
    for (const Batch& batch : *pipeline) {
      (void)batch;
      ++batches;
    }
  }
  return batches;
}

std::string PythonPipeline::state_json() const {
  if (const std::shared_ptr<Pipeline> pipeline = running()) return pipeline->state().to_json();
  std::lock_guard lock(handle_);
  return final_state_ ? final_state_->to_json() : PipelineState{}.to_json();
}

void PythonPipeline::load_state_json(const std::string& json) {
  const PipelineState state = parse_pipeline_state(json, "<state_dict>");
  py::gil_scoped_release unlocked;
  // Built first: a state of another order throws here, with the running pipeline untouched.
  std::shared_ptr<Pipeline> fresh = build(state);
  retire(install(std::move(fresh)));
}

std::string PythonPipeline::stats_json() const {
  PipelineStats stats;
  if (const std::shared_ptr<Pipeline> pipeline = running()) {
    stats = pipeline->stats();
  } else {
    std::lock_guard lock(handle_);
    if (final_stats_) stats = *final_stats_;
  }
  cli::RunInfo info;
  info.ferry_version = FERRY_VERSION;
  info.config = config_.origin;
  info.device = config_.pipeline.device;  // as asked for ("auto", "cuda"); the report adds the resolved one
  info.source = source_ ? source_->describe() : "";
  std::ostringstream out;
  cli::write_report_json(out, info, stats);
  return out.str();
}

void PythonPipeline::close() {
  if (!running()) return;
  py::gil_scoped_release unlocked;  // joining the threads takes a moment; Python may run meanwhile
  std::shared_ptr<Pipeline> last;
  {
    std::lock_guard lock(handle_);
    if (!pipeline_) return;  // another close() got here first
    last = std::move(pipeline_);
  }
  last->close();                        // wakes a next() blocked on another thread
  std::lock_guard consumer(consumer_);  // that next() has left the pipeline: the state is final
  PipelineState state = last->state();
  PipelineStats stats = last->stats();
  {
    std::lock_guard lock(handle_);
    final_state_ = std::move(state);
    final_stats_ = std::move(stats);
  }
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
    config = load_config(path, overrides);
  }
  return std::make_unique<PythonPipeline>(std::move(config), state);
}

std::unique_ptr<PythonPipeline> from_text(const std::string& yaml, const std::string& origin,
                                          const Overrides& overrides, const State& state) {
  return std::make_unique<PythonPipeline>(parse_config(yaml, origin, overrides), state);
}

}  // namespace

void bind_pipeline(py::module_& module) {
  py::class_<PythonPipeline>(module, "Pipeline", "A running ferry pipeline (use ferry.Pipeline).")
      .def_static("from_path", &from_path, py::arg("path"), py::arg("overrides"), py::arg("state"))
      .def_static("from_text", &from_text, py::arg("yaml"), py::arg("origin"), py::arg("overrides"), py::arg("state"))
      .def("next", &PythonPipeline::next, "The next batch as {field: tensor}; StopIteration at the end.")
      .def("__len__", &PythonPipeline::length)
      .def("_drain_in_cpp", &PythonPipeline::drain,
           "Takes every remaining batch in C++; returns how many (a benchmark's baseline).")
      .def("state_json", &PythonPipeline::state_json)
      .def("load_state_json", &PythonPipeline::load_state_json, py::arg("state"))
      .def("stats_json", &PythonPipeline::stats_json)
      .def("close", &PythonPipeline::close)
      .def_property_readonly("closed", &PythonPipeline::closed)
      .def_property_readonly("device", &PythonPipeline::device)
      .def_property_readonly("origin", &PythonPipeline::origin);
}

}  // namespace ferry::python
