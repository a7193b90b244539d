#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/io/workers/shared_slots.h"
#include "ferry/pipeline/pipeline_stats.h"

namespace ferry::detail {

/// What a pool's worker processes run (ferry/_worker.py reads `setup`) and how they are started.
struct WorkerSetup {
  std::string python = "python3";  // the interpreter, run as `<python> -m ferry._worker`
  std::string python_path;         // put first on the workers' PYTHONPATH ("" : theirs as inherited)
  std::string setup;               // JSON: the role, what to load, the fields
  std::string payload;             // pickled objects sent beside it ("" : none)
  std::string what;                // what the workers run, for messages: "dataset 'pkg.mod:make'"
  /// How long one call (or a worker's start) may take before the worker is stopped; 0: no limit.
  std::chrono::milliseconds timeout{0};
  /// When set, the first worker's greeting says what the others need to know (the fields it inferred from
  /// the first samples): they start at the same time, and once all are up get the setup this makes of it.
  std::function<std::string(const std::string& greeting)> after_first;
};

/// The fields a call made: names and tensors viewing the shared memory the worker wrote them to.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// One call of user code: make sample `index` of `epoch` (kMake), or transform the sample's `inputs`
/// (kTransform).
struct WorkerCall {
  enum class Op : uint8_t { kMake = 1, kTransform = 3 };
  Op op = Op::kMake;
  uint64_t index = 0;
  uint64_t epoch = 0;
  uint64_t capacity = 0;  // the output's expected bytes: its slot's size
  NamedTensors inputs;    // kTransform: the sample's fields
  /// The pipeline's stop flag (SampleContext::stop): the call gives up when it turns true.
  const std::atomic<bool>* stop = nullptr;
};

/// One call's outcome among several (PythonRunner::call_many()): the fields it made, or why it failed.
struct CallResult {
  NamedTensors fields;
  std::exception_ptr error;
};

/// What runs user Python code for the python source kind and transform: worker processes (WorkerPool),
/// or, with decode.workers: threads, this process's decode threads, which the Python package provides
/// (set_in_process_python()). Thread-safe.
class PythonRunner {
 public:
  virtual ~PythonRunner() = default;
  /// What the code said when loaded (lines after "ok"): a dataset's length and fields.
  virtual const std::string& greeting() const = 0;
  /// Runs `call` and returns the fields it made. Throws ferry::Error naming `sample` ("dataset[17]")
  /// for the user code's exception (with its traceback) or a worker that failed.
  virtual NamedTensors call(const WorkerCall& call, const std::string& sample) = 0;
  /// Runs `calls` (`samples` names each), one result each, in order: a call that fails fails alone. A
  /// worker process gets a group of make calls in one request. By default, call() for each.
  virtual std::vector<CallResult> call_many(const std::vector<WorkerCall>& calls,
                                            const std::vector<std::string>& samples);
  /// "4 workers", "the decode threads": for describe().
  virtual std::string where() const = 0;
  /// Its worker processes (0: it runs on the decode threads).
  virtual size_t processes() const = 0;
  /// What it ran so far, as `what` says ("python dataset 'pkg.mod:make'"), for the report. Thread-safe.
  UserCodeStats stats(std::string what) const;

 protected:
  // What stats() reports; counted by the runners.
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> busy_ns_{0};
  std::atomic<uint64_t> replaced_{0};
};

/// Each field of a slot starts on a cache line (ferry/_worker.py aligns the same way).
inline constexpr uint64_t kSlotAlignment = 64;
inline uint64_t slot_aligned(uint64_t offset) noexcept {
  return (offset + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
}
/// Raises `largest` to `bytes` if that is more (a slot size learnt from the samples so far). Thread-safe.
inline void remember_largest(std::atomic<uint64_t>& largest, uint64_t bytes) noexcept {
  uint64_t known = largest.load(std::memory_order_relaxed);
  while (bytes > known && !largest.compare_exchange_weak(known, bytes, std::memory_order_relaxed)) {
  }
}

/// The dtype a field's code names (ferry/_worker.py's _DTYPES), and the code of a dtype (throws
/// ferry::Error naming `field` for one Python code cannot be given).
at::ScalarType dtype_of_code(uint8_t code);
uint8_t code_of_dtype(at::ScalarType dtype, const std::string& field);

/// Makes the runner `setup` asks for: `workers` processes, or with 0 the decode threads of this process
/// (throws ferry::Error when the Python package has not provided them: `ferry run` runs processes).
std::unique_ptr<PythonRunner> make_python_runner(WorkerSetup setup, size_t workers);
/// How the Python package runs code in this process (decode.workers: threads): a factory of runners.
void set_in_process_python(std::function<std::unique_ptr<PythonRunner>(const WorkerSetup& setup)> factory);

/// Worker processes that run Python code for a pipeline (Note [Python workers]). Started with spawn
/// (a new interpreter, never a fork of this process, which may hold a CUDA context), each takes one
/// call at a time; call() uses whichever is idle. A worker that dies or overruns the timeout fails its
/// call with an error naming it and the sample, and is replaced. Thread-safe.
class WorkerPool : public PythonRunner {
 public:
  /// Starts `workers` processes and waits until each has loaded what `setup` names. Throws ferry::Error
  /// with the first worker's error (its Python traceback) when they cannot start.
  WorkerPool(WorkerSetup setup, size_t workers);
  /// Stops every worker: each is gone (and reaped) when this returns, within about a second.
  ~WorkerPool() override;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// What the first worker said when it started (lines after "ok"): the dataset's length and fields.
  const std::string& greeting() const noexcept override { return greeting_; }
  /// Runs `call` on an idle worker (waiting for one) and returns the fields it wrote. Throws ferry::Error
  /// for the user code's exception (with its traceback), a worker that died or timed out, or a pool that
  /// has no worker left. `sample` names the sample in messages ("sample 17").
  NamedTensors call(const WorkerCall& call, const std::string& sample) override;
  /// Make calls go to one idle worker in one request; it replies to each in turn. Where a worker dies or
  /// overruns the timeout, the call it was making fails and the ones after it go to another worker.
  std::vector<CallResult> call_many(const std::vector<WorkerCall>& calls,
                                    const std::vector<std::string>& samples) override;
  std::string where() const override {
    return std::to_string(size_) + " worker" + (size_ == 1 ? "" : "s");
  }
  size_t processes() const override { return size_; }

 private:
  struct Worker;
  /// An idle worker; waits for one (having lost ones replaced). Throws when none is running or starting,
  /// or when `stop` turns true.
  std::unique_ptr<Worker> take(const std::atomic<bool>* stop);
  void give_back(std::unique_ptr<Worker> worker);
  /// Stops `worker` (killing it if it still runs); the next take() has another started in its place.
  /// Returns how it ended ("killed by signal 9 (SIGKILL)").
  std::string retire(std::unique_ptr<Worker> worker, bool kill_first);
  /// This process's environment as the workers get it: PYTHONPATH led by setup_.python_path, the
  /// parent's pid, malloc tunables.
  std::vector<std::string> worker_environment() const;
  /// Starts `count` workers and waits for their greetings (on the spawner thread).
  void start_workers(size_t count);
  void spawner_loop();
  /// Stops the spawner thread and every idle worker (none is busy once the pipeline is gone).
  void shutdown();
  /// Runs the calls `pending` names on one worker (the leading make calls in one request, a transform call
  /// alone), fills their results, and returns those still to run (at least one fewer).
  std::vector<size_t> run_calls(const std::vector<WorkerCall>& calls, const std::vector<std::string>& samples,
                                const std::vector<size_t>& pending, std::vector<CallResult>& results);
  /// Copies a transform's inputs into a slot and describes them at the end of `request`.
  std::shared_ptr<const Slot> write_inputs(const NamedTensors& inputs, std::string& request) const;

  WorkerSetup setup_;
  size_t size_;
  std::shared_ptr<SharedSlots> slots_;
  int payload_fd_ = -1;  // the pickled payload, as a memory file each worker reads
  std::vector<std::string> environment_;
  std::string greeting_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;       // for the spawner thread and the constructor: starts asked and done
  std::condition_variable idle_changed_;  // for callers waiting for a worker (take())
  std::deque<std::unique_ptr<Worker>> idle_;
  size_t running_ = 0;    // idle or busy
  size_t to_start_ = 0;   // replacements asked of the spawner thread
  size_t starting_ = 0;   // being started by it
  uint64_t started_ = 0;
  std::string start_error_;  // why the last replacement could not start
  size_t failed_starts_ = 0;  // starts in a row that gave no worker
  std::atomic<bool> stopping_{false};  // set under mutex_; read without it by a start waiting for greetings
  // Every worker is spawned from this thread, which lives as long as the pool: a worker asks the kernel
  // to kill it when the thread that started it ends (PR_SET_PDEATHSIG), and so with this process.
  std::thread spawner_;
};

}  // namespace ferry::detail
