#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/utils/pybind.h>

#include <ferry/assembly/config.h>
#include <ferry/io/formats/source.h>
#include <ferry/pipeline/pipeline_group.h>
#include <ferry/stages/batch_planner.h>

namespace ferry::python {

/// ferry.Pipeline's engine (ferry._C.Pipeline): a ferry::PipelineGroup built from a config (of one pipeline,
/// or one per device of transfer.devices), handing its batches to Python as dicts of the pipeline's own
/// tensors (no copy): a ferry.Batch per step, or with transfer.devices a list of them, one per device.
///
/// Every call that works or waits in C++ releases the GIL: building (which indexes the dataset),
/// next() while it waits for a batch, close(), destruction. next() waits in slices of
/// kSignalPollInterval and checks for signals between them, so Ctrl-C raises KeyboardInterrupt in a
/// blocked iteration within that interval. Thread-safe: one next() at a time (others wait), close()
/// and stats() from any thread.
class PythonPipeline {
 public:
  static constexpr std::chrono::milliseconds kSignalPollInterval{100};

  /// `config` as loaded (load_config/parse_config); `state_json`, when given, a saved state_json().
  /// Throws ConfigError/ferry::Error before any thread starts for an invalid config or state.
  PythonPipeline(Config config, const std::optional<std::string>& state_json);
  ~PythonPipeline();
  PythonPipeline(const PythonPipeline&) = delete;
  PythonPipeline& operator=(const PythonPipeline&) = delete;

  /// The next step: with transfer.devices a list of ferry.Batch, one per device; otherwise the batch itself.
  /// A batch is a ferry.Batch (a dict {field name: tensor} with epoch, index, sequence and the
  /// sample indices), or None at the end of the run (and after close()). With `epoch`, only batches of
  /// that epoch: None once the next batch belongs to a later epoch (which is held back for the next
  /// call), and batches of earlier epochs (left by a loop that stopped early) are dropped. A stage's
  /// failure raises ferry.Error. Call with the GIL held.
  pybind11::object next(std::optional<uint64_t> epoch);
  /// The epoch the run starts in (a resumed run's), and the configured number of epochs.
  uint64_t first_epoch() const;
  uint64_t epochs() const;
  /// Batches `epoch` delivers in this run (a resumed run's first epoch: those left; 0 past
  /// max_batches). An upper bound under on_error: skip.
  uint64_t epoch_length(uint64_t epoch) const;
  /// Batches this run delivers in all, from its start (a resumed one: those left).
  uint64_t length() const;
  /// Takes every remaining batch in C++ (Pipeline::next(), no Python object per batch) and returns
  /// how many: the C++ iterator as a baseline for benchmarks of Python iteration. GIL released.
  uint64_t drain();
  /// A training loop in C++ for bench/overlap.py: takes up to `steps` batches, after each one a
  /// simulated step of `step_seconds` (a sleep kernel of `cycles` GPU clock cycles on the current
  /// stream and one synchronization, as loss.item() does; on the CPU, a sleep). Returns {"steps",
  /// "loop_seconds", "wait_seconds", "first_wait_seconds"}: the loop's time and the time spent in
  /// next(), both from the first batch on, and the first batch's wait (the pipeline's start-up).
  /// GIL released.
  pybind11::dict train_in_cpp(uint64_t steps, double step_seconds, int64_t cycles);
  /// PipelineGroup::state() as its JSON text: states_json() (one device: the PipelineState's own).
  std::string state_json() const;
  /// Restarts at a saved state: the batches delivered next are those the saved run had not
  /// delivered. The new pipeline is built before the running one is closed, so a state of another
  /// order raises ConfigError and leaves this one running where it was. Call with the GIL held.
  void load_state_json(const std::string& json);
  /// Pipeline::cache_to() on the running pipeline. GIL released while the cache moves.
  void cache_to(int device);
  /// The run's stats as the JSON report `ferry run --report` writes (docs/report.md).
  std::string stats_json() const;
  /// Stops the work and frees every thread and pinned slab; a next() blocked on another thread
  /// returns. Idempotent. Call with the GIL held.
  void close();
  bool closed() const;
  /// The resolved device ("cpu", "cuda:0") and the config's origin.
  std::string device() const;
  /// The source's class names (an image folder's class folders), in label order; empty where none.
  std::vector<std::string> class_names() const;
  const std::string& origin() const noexcept { return config_.origin; }

 private:
  /// The next batch of the running pipeline, or nullopt at its end: waits in slices of
  /// kSignalPollInterval, taking the GIL between them to check for signals. `consumer` is held, the
  /// GIL not.
  std::optional<BatchGroup> take(std::unique_lock<std::mutex>& consumer);
  /// The step as Python sees it: a ferry.Batch, or a list of them with transfer.devices. GIL held.
  pybind11::object to_python(const BatchGroup& step) const;
  /// Records, for state_json(), the epoch of the batch held back in pending_ (nullopt: none).
  void set_pending_epoch(std::optional<uint64_t> epoch);
  /// `state` (the pipeline's) without the batch held back in pending_: where Python's next batch
  /// starts. Call with handle_ held.
  std::vector<PipelineState> delivered_state(std::vector<PipelineState> states) const;
  /// A new pipeline of config_ (at `resume`); becomes the running one through install(). GIL
  /// released by the caller.
  std::shared_ptr<PipelineGroup> build(const std::vector<PipelineState>& resume) const;
  /// Makes `pipeline` the running one; returns the one it replaces (to be closed by the caller).
  std::shared_ptr<PipelineGroup> install(std::shared_ptr<PipelineGroup> pipeline);
  /// Stops `pipeline`, waits until no next() is inside it, and drops this object's references to
  /// it; GIL released by the caller.
  void retire(std::shared_ptr<PipelineGroup> pipeline);

  Config config_;
  /// Made with the pipeline and dropped by close() (a load_state_json() after it makes it again). Used by
  /// the consumer's calls only (close(), load_state_json()), which Python makes one at a time.
  std::shared_ptr<const Source> source_;
  // Batch.sample_keys's function, made with the GIL at the first batch of each source (to_python()).
  mutable pybind11::object key_of_;
  mutable std::weak_ptr<const Source> key_source_;
  std::string source_description_;  // for the report
  /// The running pipeline (null once closed), read under `handle_`.
  std::shared_ptr<PipelineGroup> running() const;

  // One next() at a time holds `consumer_`. close() wakes it through Pipeline::close() (thread-safe),
  // then takes `consumer_` to destroy the pipeline once no next() is inside it.
  std::mutex consumer_;
  // A batch taken from the pipeline for next(epoch) that belongs to a later epoch: the first of the
  // next loop. Guarded by consumer_; it counts as not delivered in state_json().
  std::optional<BatchGroup> pending_;
  mutable std::mutex handle_;  // guards the members below; never held while waiting
  std::shared_ptr<PipelineGroup> pipeline_;
  std::string device_;                     // the running (or last) pipeline's resolved device
  std::optional<uint64_t> pending_epoch_;  // pending_'s epoch, readable without consumer_
  std::optional<BatchPlanner> planner_;    // its planner's twin, for the run's and epochs' lengths (never run)
  // What state_json() and stats_json() report after close().
  std::optional<std::vector<PipelineState>> final_state_;
  std::optional<std::vector<PipelineStats>> final_stats_;
};

/// Adds ferry._C.Pipeline to `module`.
void bind_pipeline(pybind11::module_& module);

}  // namespace ferry::python
