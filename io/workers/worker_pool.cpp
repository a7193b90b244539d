#include "ferry/io/workers/worker_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <string_view>

#include <c10/util/Exception.h>

#include "ferry/io/util/units.h"
#include "ferry/pipeline/error.h"

extern char** environ;

namespace ferry::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Python workers]
// ~~~~~~~~~~~~~~~~~~~~~
// User Python code (a map-style dataset's __getitem__, a python transform) runs in worker processes so
// that the GIL of one interpreter does not bound the pipeline. Each worker is a new interpreter, started
// with posix_spawn (`python -m ferry._worker`), never a fork: this process may hold a CUDA context and
// locks that a fork would copy in an undefined state.
//
// A worker talks over one SOCK_SEQPACKET socket (its descriptor 3): messages keep their bounds, the
// kernel passes descriptors with them, and the worker's end closing says at once that it died. Only
// small messages cross it: the sample's index and epoch and a slot (SharedSlots) to write into. The
// worker writes the sample's arrays straight into that shared memory, the decode thread views them as
// tensors without a copy, and they are packed into the pinned slab from there: array payloads are never
// pickled. A segment's descriptor travels once per worker, before the first call that uses it.
//
// The messages (little-endian), from this process:
//   setup      JSON text (ferry/_worker.py), and the pickled payload's memory file when there is one
//   map        op 4, segment u32, bytes u64 — with the segment's descriptor
//   call       op 1 (make) or 3 (transform) u8, 3 pad, segment u32, offset u64, capacity u64, index u64,
//              epoch u64; a transform's input after it: input segment u32, 4 pad, input offset u64,
//              count u32, the fields as in "written" (their offsets within the input's slot). Make calls
//              come several to a message (a decode thread's group of samples, 40 bytes each): a request
//   progress   op 6, 3 pad, segment u32, offset u64: the worker's progress word, before its first request
//   slot       op 2, segment u32, offset u64, capacity u64: a larger slot, after "need"
//   setup      op 5, then JSON text: the setup with the fields the first worker inferred (the others
//              started at the same time, without them)
// and from the worker:
//   greeting   "ok\n" and lines of its own, or "error\n" and the traceback
//   replies    status 3 u8, 3 pad, count u32, then per call of the request, in order: length u32 and
//              "written" or "error": a request's in one message, or in several where the replies pass
//              128 KiB (tracebacks)
//   written    status 0 u8, 3 pad, count u32, busy ns u64 (the call's time in the worker), then per
//              field: dtype u8, ndim u8, name length u16, 4 pad, offset u64, shape i64 x ndim, name
//   error      status 2, 3 pad, then the user code's traceback as text
//   need       status 1, 3 pad, call u32 (its place in the request), bytes u64: the sample is larger than
//              its slot
//
// One message each way per group keeps a group's cost near one round trip: a message per sample woke the
// decode thread for each (a third of the CPU time of 1 KiB samples). What the replies would say while a
// request runs, the progress word says instead: the worker writes 2k + 1 to it as it starts call k of the
// request and 2k + 2 when it is done. When the worker dies, the call it was making fails, and those it
// made without replying go to another worker with those after it; decode.timeout runs from the last
// change.
//
// A worker ends when its socket closes (this process closed it or died), and is killed with this
// process however it dies: it sets PR_SET_PDEATHSIG, which fires when the thread that spawned it ends,
// hence the pool's spawner thread. Samples live in memory files without names, which cannot leak. A
// worker that died, overran decode.timeout or was stopped mid-sample (the pipeline closing) is reaped
// at once and replaced when the next call needs it.

constexpr int kWorkerFd = 3;
constexpr size_t kMaxMessage = size_t{1} << 20;
constexpr auto kPollSlice = std::chrono::milliseconds(50);
// How long a closed worker has to exit before it is killed.
constexpr auto kExitGrace = std::chrono::milliseconds(500);
// The least time a worker has to start (import its modules, unpickle the dataset), whatever decode.timeout.
constexpr auto kStartTimeout = std::chrono::seconds(60);
// Replacements that fail to start in a row before the pool stops trying.
constexpr size_t kStartAttempts = 3;

enum class Received { kMessage, kClosed, kTimeout, kStopped };

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <typename T>
T get(std::string_view in, size_t& at) {
  if (at + sizeof(T) > in.size()) throw Error("a worker's reply is cut short (" + std::to_string(in.size()) + " bytes)");
  T value;
  std::memcpy(&value, in.data() + at, sizeof(T));
  at += sizeof(T);
  return value;
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    const char* name = sigabbrev_np(signal);
    return "killed by signal " + std::to_string(signal) + (name != nullptr ? " (SIG" + std::string(name) + ")" : "");
  }
  return "ended (status " + std::to_string(status) + ")";
}

// ferry/_worker.py's _DTYPES, in order.
constexpr at::ScalarType kDtypeCodes[] = {at::kByte, at::kInt, at::kLong, at::kHalf, at::kBFloat16, at::kFloat};

std::mutex& in_process_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::function<std::unique_ptr<PythonRunner>(const WorkerSetup&)>& in_process() {
  static std::function<std::unique_ptr<PythonRunner>(const WorkerSetup&)> factory;
  return factory;
}

bool send_message(int socket, const std::string& bytes, int fd = -1) {
  iovec data{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  }
  ssize_t sent = 0;
  do {
    sent = sendmsg(socket, &message, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(bytes.size());
}

}  // namespace

at::ScalarType dtype_of_code(uint8_t code) {
  if (code >= std::size(kDtypeCodes)) throw Error("a reply names dtype code " + std::to_string(code));
  return kDtypeCodes[code];
}

uint8_t code_of_dtype(at::ScalarType dtype, const std::string& field) {
  for (uint8_t i = 0; i < std::size(kDtypeCodes); ++i) {
    if (kDtypeCodes[i] == dtype) return i;
  }
  throw Error("field '" + field + "' is " + std::string(c10::toString(dtype)) +
              ", which Python code cannot be given (uint8, int32, int64, float16, bfloat16, float32)");
}

std::unique_ptr<PythonRunner> make_python_runner(WorkerSetup setup, size_t workers) {
  if (workers > 0) return std::make_unique<WorkerPool>(std::move(setup), workers);
  std::function<std::unique_ptr<PythonRunner>(const WorkerSetup&)> factory;
  {
    std::lock_guard lock(in_process_mutex());
    factory = in_process();
  }
  if (!factory) {
    throw Error("decode.workers: threads runs " + setup.what +
                " in this process, which only ferry's Python package can (ferry.Pipeline); here, give a number of "
                "worker processes");
  }
  return factory(setup);
}

void set_in_process_python(std::function<std::unique_ptr<PythonRunner>(const WorkerSetup& setup)> factory) {
  std::lock_guard lock(in_process_mutex());
  in_process() = std::move(factory);
}

struct WorkerPool::Worker {
  uint64_t number = 0;
  pid_t pid = -1;
  bool reaped = false;
  int socket = -1;
  std::set<uint32_t> mapped;  // segments whose descriptor it has
  std::string buffer;
  // Where it says how far into a request it is (Note [Python workers]); leased at its first request.
  std::shared_ptr<const Slot> progress;

  uint64_t progress_now() const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(progress->data)).load(std::memory_order_acquire);
  }
  void reset_progress() const {
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(progress->data)).store(0, std::memory_order_release);
  }

  std::string name() const { return "worker " + std::to_string(number) + " (pid " + std::to_string(pid) + ")"; }

  /// The next message, waiting until `deadline` (none: time_point::max()), or until `stop` turns true.
  Received receive(std::string& out, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr) {
    for (;;) {
      if (stop != nullptr && stop->load(std::memory_order_acquire)) return Received::kStopped;
      const auto now = Clock::now();
      if (now >= deadline) return Received::kTimeout;
      const auto wait = std::min<Clock::duration>(deadline - now, kPollSlice);
      pollfd ready{socket, POLLIN, 0};
      const int polled = poll(&ready, 1, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
      if (polled < 0 && errno != EINTR) return Received::kClosed;
      if (polled <= 0) continue;
      buffer.resize(kMaxMessage);
      const ssize_t got = recv(socket, buffer.data(), buffer.size(), 0);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) return Received::kClosed;
      out.assign(buffer.data(), static_cast<size_t>(got));
      return Received::kMessage;
    }
  }

  /// Waits for the process to end (killing it first, or after kExitGrace) and says how it ended.
  std::string reap(bool kill_first) {
    if (socket >= 0) close(socket);
    socket = -1;
    if (pid <= 0 || reaped) return "not started";
    if (kill_first) kill(pid, SIGKILL);
    int status = 0;
    const auto deadline = Clock::now() + kExitGrace;
    for (;;) {
      const pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid) break;
      if (done < 0 && errno != EINTR) return "gone";
      if (Clock::now() >= deadline) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    reaped = true;  // the pid stays, for messages
    return exit_text(status);
  }
};

WorkerPool::WorkerPool(WorkerSetup setup, size_t workers)
    : setup_(std::move(setup)), size_(std::max<size_t>(1, workers)), slots_(SharedSlots::make()) {
  if (!setup_.payload.empty()) {
    payload_fd_ = memfd_create("ferry-payload", MFD_CLOEXEC);
    size_t written = 0;
    while (payload_fd_ >= 0 && written < setup_.payload.size()) {  // write() moves at most ~2 GiB at once
      const ssize_t wrote = write(payload_fd_, setup_.payload.data() + written, setup_.payload.size() - written);
      if (wrote <= 0 && errno != EINTR) break;
      if (wrote > 0) written += static_cast<size_t>(wrote);
    }
    if (payload_fd_ < 0 || written < setup_.payload.size()) {
      const int error = errno;
      if (payload_fd_ >= 0) close(payload_fd_);
      throw Error("cannot hand " + setup_.what + " (" + format_byte_size(setup_.payload.size()) +
                  " pickled) to worker processes: " + std::strerror(error));
    }
    setup_.payload.clear();
    setup_.payload.shrink_to_fit();
  }
  environment_ = worker_environment();  // read once: the environment may change while the pool lives
  {
    std::lock_guard lock(mutex_);
    to_start_ = size_;
  }
  spawner_ = std::thread([this] { spawner_loop(); });
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return running_ == size_ || (!start_error_.empty() && to_start_ == 0 && starting_ == 0); });
  bool started = running_ == size_;
  if (started && setup_.after_first) {
    // The first worker inferred the fields from the first samples while the others loaded: they are told
    // them now, and replacements start with them.
    try {
      setup_.setup = setup_.after_first(greeting_);
    } catch (const std::exception& e) {
      start_error_ = setup_.what + ": " + cause_of(e);
      started = false;
    }
    std::string message;
    put<uint8_t>(message, 5);
    message += setup_.setup;
    for (const auto& worker : idle_) {
      if (!started || worker->number == 0 || send_message(worker->socket, message)) continue;
      start_error_ = worker->name() + " ended before it could be told the fields of " + setup_.what;
      started = false;
    }
  }
  if (!started) {
    const std::string error = start_error_;
    lock.unlock();
    shutdown();
    throw Error(error);
  }
}

WorkerPool::~WorkerPool() { shutdown(); }

void WorkerPool::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  idle_changed_.notify_all();
  if (spawner_.joinable()) spawner_.join();
  std::deque<std::unique_ptr<Worker>> idle;
  {
    std::lock_guard lock(mutex_);
    idle.swap(idle_);
  }
  // Closing its socket tells each worker to exit; all of them are told before any is waited for.
  for (auto& worker : idle) {
    close(worker->socket);
    worker->socket = -1;
  }
  for (auto& worker : idle) worker->reap(false);
  if (payload_fd_ >= 0) close(payload_fd_);
  payload_fd_ = -1;
}

void WorkerPool::spawner_loop() {
  for (;;) {
    size_t count = 0;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || to_start_ > 0; });
      if (stopping_) return;
      count = to_start_;
      to_start_ = 0;
      starting_ += count;
    }
    start_workers(count);
  }
}

std::vector<std::string> WorkerPool::worker_environment() const {
  // The environment: this process's, with PYTHONPATH led by the package's folder and the parent's pid.
  std::vector<std::string> environment;
  std::string python_path = setup_.python_path;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    if (text.starts_with("PYTHONPATH=")) {
      const std::string_view inherited = text.substr(11);
      if (python_path.empty()) {
        python_path = inherited;
      } else if (!inherited.empty()) {
        python_path += ":" + std::string(inherited);
      }
      continue;
    }
    if (text.starts_with("FERRY_WORKER_PARENT=")) continue;
    environment.emplace_back(text);
  }
  if (!python_path.empty()) environment.push_back("PYTHONPATH=" + python_path);
  environment.push_back("FERRY_WORKER_PARENT=" + std::to_string(getpid()));
  // A sample's buffers (a decoded image, a resized one) are a few hundred KiB: above glibc's first mmap
  // threshold, so each is mapped and unmapped again, and the worker spends its time in page faults (a
  // JPEG decoded and resized with PIL: 2.3 ms a sample; 0.93 ms with these, as in a process that
  // imported torch, whose large allocations raise the threshold). Unless the user set tunables.
  if (std::none_of(environment.begin(), environment.end(),
                   [](const std::string& entry) { return entry.starts_with("GLIBC_TUNABLES="); })) {
    environment.push_back("GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=134217728");
  }
  return environment;
}

void WorkerPool::start_workers(size_t count) {
  std::vector<std::unique_ptr<Worker>> fresh;
  std::string error;
  uint64_t first_number = 0;
  {
    std::lock_guard lock(mutex_);
    first_number = started_;
    started_ += count;
  }
  std::vector<std::string> environment = environment_;
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string python = setup_.python;
  std::string dash_m = "-m";
  std::string module = "ferry._worker";
  char* argv[] = {python.data(), dash_m.data(), module.data(), nullptr};

  for (size_t i = 0; i < count; ++i) {
    auto worker = std::make_unique<Worker>();
    worker->number = first_number + i;
    int ends[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) {
      error = std::string("cannot make a socket for a worker process: ") + std::strerror(errno);
      break;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, ends[1], kWorkerFd);  // dup2 clears close-on-exec
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    // Ctrl-C goes to the terminal's whole process group: the workers ignore it (ferry/_worker.py) and
    // this process decides; default signal dispositions otherwise.
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGTERM);
    posix_spawnattr_setsigdefault(&attributes, &defaults);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    pid_t pid = -1;
    const int spawned = posix_spawnp(&pid, python.c_str(), &actions, &attributes, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    close(ends[1]);
    if (spawned != 0) {
      close(ends[0]);
      error = "cannot start a Python worker with '" + setup_.python + "': " + std::strerror(spawned) +
              " (set decode.python to the interpreter that has ferry and your code)";
      break;
    }
    worker->pid = pid;
    worker->socket = ends[0];
    // The worker's number joins the setup: the first one also infers the fields from the first samples.
    const std::string setup = "{\"worker\": " + std::to_string(worker->number) + ", " + setup_.setup.substr(1);
    if (!send_message(worker->socket, setup, payload_fd_)) {
      const std::string name = worker->name();
      error = name + " " + worker->reap(true) + " before it could be told what to run";
      continue;
    }
    fresh.push_back(std::move(worker));
  }

  // Their greetings, from all at once: each loads what it runs (imports, the dataset) meanwhile.
  // A start (imports, unpickling the dataset) may take longer than a sample: at least kStartTimeout.
  const auto deadline = setup_.timeout.count() > 0 ? Clock::now() + std::max<Clock::duration>(setup_.timeout, kStartTimeout)
                                                   : Clock::time_point::max();
  std::vector<std::unique_ptr<Worker>> ready;
  for (auto& worker : fresh) {
    std::string reply;
    const Received got = worker->receive(reply, deadline, &stopping_);
    if (got == Received::kStopped) {
      worker->reap(true);
      continue;
    }
    if (got == Received::kMessage && reply.starts_with("ok\n")) {
      if (worker->number == 0) greeting_ = reply.substr(3);
      ready.push_back(std::move(worker));
      continue;
    }
    if (got == Received::kMessage && reply.starts_with("error\n")) {
      error = worker->name() + " could not load " + setup_.what + ":\n" + reply.substr(6);
      worker->reap(false);
    } else if (got == Received::kTimeout) {
      error = worker->name() + " did not load " + setup_.what + " within " +
              std::to_string(std::max<Clock::duration>(setup_.timeout, kStartTimeout) / std::chrono::seconds(1)) +
              " s (decode.timeout, and at least " + std::to_string(kStartTimeout / std::chrono::seconds(1)) +
              " s for a start); it was stopped";
      worker->reap(true);
    } else {
      const std::string name = worker->name();
      const std::string ended = worker->reap(false);
      error = name + " " + ended + " while loading " + setup_.what +
              (ended.find("status 1") != std::string::npos
                   ? " (see its message above: is '" + setup_.python + "' an interpreter that has ferry's package and numpy?)"
                   : "");
    }
  }
  {
    std::lock_guard lock(mutex_);
    starting_ -= count;
    for (auto& worker : ready) idle_.push_back(std::move(worker));
    running_ += ready.size();
    if (!error.empty()) start_error_ = error;
    failed_starts_ = ready.empty() && !error.empty() ? failed_starts_ + 1 : 0;
  }
  changed_.notify_all();
  idle_changed_.notify_all();  // new workers are idle, or the start failed
}

std::unique_ptr<WorkerPool::Worker> WorkerPool::take(const std::atomic<bool>* stop) {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (!idle_.empty()) {
      std::unique_ptr<Worker> worker = std::move(idle_.front());
      idle_.pop_front();
      return worker;
    }
    // Workers that died or were stopped are replaced when work needs them, not at once: a pipeline that
    // stops its calls to close waits for no new worker to start. Starts that keep failing (an import that
    // broke meanwhile) are given up after kStartAttempts in a row.
    if (running_ + to_start_ + starting_ < size_ && failed_starts_ < kStartAttempts) {
      to_start_ = size_ - running_ - starting_;
      changed_.notify_all();
    }
    if (running_ == 0 && to_start_ == 0 && starting_ == 0) {
      throw Error("no worker process is left to run " + setup_.what +
                  (start_error_.empty() ? std::string() : ": the last one to start failed: " + start_error_));
    }
    idle_changed_.wait_for(lock, kPollSlice);
    if (stop != nullptr && stop->load(std::memory_order_acquire)) {
      throw Error("the pipeline stopped while waiting for a worker of " + setup_.what);
    }
  }
}

void WorkerPool::give_back(std::unique_ptr<Worker> worker) {
  {
    std::lock_guard lock(mutex_);
    idle_.push_back(std::move(worker));
  }
  idle_changed_.notify_one();  // one caller can take it
}

std::string WorkerPool::retire(std::unique_ptr<Worker> worker, bool kill_first) {
  const std::string ended = worker->reap(kill_first);
  {
    std::lock_guard lock(mutex_);
    --running_;
  }
  replaced_.fetch_add(1, std::memory_order_relaxed);
  changed_.notify_all();
  idle_changed_.notify_all();  // a caller waiting for a worker asks for its replacement
  return ended;
}

std::shared_ptr<const Slot> WorkerPool::write_inputs(const NamedTensors& inputs, std::string& request) const {
  uint64_t bytes = 0;
  for (const auto& [name, tensor] : inputs) bytes = slot_aligned(bytes) + tensor.nbytes();
  std::shared_ptr<const Slot> input = slots_->lease(std::max<uint64_t>(bytes, 1));
  put<uint32_t>(request, input->segment);
  request.append(4, '\0');
  put<uint64_t>(request, input->offset);
  put<uint32_t>(request, static_cast<uint32_t>(inputs.size()));
  uint64_t offset = 0;
  for (const auto& [name, original] : inputs) {
    const at::Tensor tensor = original.contiguous();
    offset = slot_aligned(offset);
    put<uint8_t>(request, code_of_dtype(tensor.scalar_type(), name));
    put<uint8_t>(request, static_cast<uint8_t>(tensor.dim()));
    put<uint16_t>(request, static_cast<uint16_t>(name.size()));
    request.append(4, '\0');
    put<uint64_t>(request, offset);
    for (const int64_t size : tensor.sizes()) put<int64_t>(request, size);
    request += name;
    if (tensor.nbytes() > 0) std::memcpy(input->data + offset, tensor.data_ptr(), tensor.nbytes());
    offset += tensor.nbytes();
  }
  return input;
}

UserCodeStats PythonRunner::stats(std::string what) const {
  UserCodeStats stats;
  stats.what = std::move(what);
  stats.processes = processes();
  stats.calls = calls_.load(std::memory_order_relaxed);
  stats.requests = requests_.load(std::memory_order_relaxed);
  stats.busy_seconds = static_cast<double>(busy_ns_.load(std::memory_order_relaxed)) * 1e-9;
  stats.replaced = replaced_.load(std::memory_order_relaxed);
  return stats;
}

std::vector<CallResult> PythonRunner::call_many(const std::vector<WorkerCall>& calls,
                                                const std::vector<std::string>& samples) {
  std::vector<CallResult> results(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    try {
      results[i].fields = call(calls[i], samples[i]);
    } catch (...) {
      results[i].error = std::current_exception();
    }
  }
  return results;
}

NamedTensors WorkerPool::call(const WorkerCall& call, const std::string& sample) {
  std::vector<CallResult> results = call_many({call}, {sample});
  if (results.front().error) std::rethrow_exception(results.front().error);
  return std::move(results.front().fields);
}

std::vector<CallResult> WorkerPool::call_many(const std::vector<WorkerCall>& calls,
                                              const std::vector<std::string>& samples) {
  std::vector<CallResult> results(calls.size());
  std::vector<size_t> pending(calls.size());
  for (size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  while (!pending.empty()) pending = run_calls(calls, samples, pending, results);
  return results;
}

namespace {

// The fields of a "written" reply (from `at`, after its status), as views of `slot`.
NamedTensors read_written(std::string_view reply, size_t at, const std::shared_ptr<const Slot>& slot,
                          const std::string& worker, uint64_t& busy_ns) {
  const auto count = get<uint32_t>(reply, at);
  busy_ns = get<uint64_t>(reply, at);
  if (count > reply.size()) throw Error(worker + " sent a reply of " + std::to_string(count) + " fields");
  NamedTensors out;
  out.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    const at::ScalarType dtype = dtype_of_code(get<uint8_t>(reply, at));
    const auto ndim = get<uint8_t>(reply, at);
    const auto name_length = get<uint16_t>(reply, at);
    at += 4;
    const auto offset = get<uint64_t>(reply, at);
    std::vector<int64_t> shape(ndim);
    for (int64_t& size : shape) size = get<int64_t>(reply, at);
    if (at + name_length > reply.size()) throw Error("a worker's reply is cut short");
    std::string name(reply.substr(at, name_length));
    at += name_length;
    uint64_t elements = 1;
    bool fits = true;
    for (const int64_t size : shape) {
      fits = fits && size >= 0 && (size == 0 || elements <= slot->capacity / static_cast<uint64_t>(size));
      elements *= static_cast<uint64_t>(std::max<int64_t>(size, 0));
    }
    if (!fits || offset > slot->capacity || elements * at::elementSize(dtype) > slot->capacity - offset) {
      throw Error(worker + " wrote field '" + name + "' past its slot");
    }
    out.emplace_back(std::move(name), SharedSlots::view(slot, offset, dtype, shape));
  }
  return out;
}

}  // namespace

std::vector<size_t> WorkerPool::run_calls(const std::vector<WorkerCall>& calls,
                                          const std::vector<std::string>& samples,
                                          const std::vector<size_t>& pending, std::vector<CallResult>& results) {
  size_t count = 1;
  if (calls[pending.front()].op == WorkerCall::Op::kMake) {
    while (count < pending.size() && calls[pending[count]].op == WorkerCall::Op::kMake) ++count;
  }
  std::vector<size_t> later(pending.begin() + static_cast<std::ptrdiff_t>(count), pending.end());
  // Slots (and a transform's input) are made before a worker is taken: a failure here (no memory for a
  // slot, a dtype Python cannot be given) is that call's alone.
  struct Sent {
    size_t call;
    std::shared_ptr<const Slot> slot;
  };
  std::vector<Sent> sent;
  std::shared_ptr<const Slot> input;  // a transform's, until the worker replies
  std::string request;
  for (size_t i = 0; i < count; ++i) {
    const size_t k = pending[i];
    const WorkerCall& call = calls[k];
    try {
      std::shared_ptr<const Slot> slot = slots_->lease(std::max<uint64_t>(call.capacity, 1));
      std::string record;
      put<uint8_t>(record, static_cast<uint8_t>(call.op));
      record.append(3, '\0');
      put<uint32_t>(record, slot->segment);
      put<uint64_t>(record, slot->offset);
      put<uint64_t>(record, slot->capacity);
      put<uint64_t>(record, call.index);
      put<uint64_t>(record, call.epoch);
      if (call.op == WorkerCall::Op::kTransform) input = write_inputs(call.inputs, record);
      request += record;
      sent.push_back(Sent{k, std::move(slot)});
    } catch (...) {
      results[k].error = std::current_exception();
    }
  }
  if (sent.empty()) return later;
  const std::atomic<bool>* stop = calls[pending.front()].stop;
  size_t replied = 0;  // in `sent`: the calls the worker replied to
  // The calls from `from` on fail with `error`; the calls from `retry` on (none: sent.size()) go to another
  // worker, after those not sent yet.
  const auto finish = [&](size_t from, const std::exception_ptr& error, size_t retry) {
    for (size_t i = from; i < retry && i < sent.size(); ++i) results[sent[i].call].error = error;
    std::vector<size_t> again;
    for (size_t i = retry; i < sent.size(); ++i) again.push_back(sent[i].call);
    again.insert(again.end(), later.begin(), later.end());
    return again;
  };

  std::unique_ptr<Worker> worker;
  // A failure of this process's own (a reply it cannot read) leaves the worker in an unknown state: it is
  // replaced, never lost to the pool.
  struct Held {
    WorkerPool& pool;
    std::unique_ptr<Worker>& worker;
    ~Held() {
      if (worker) pool.retire(std::move(worker), true);
    }
  } held{*this, worker};
  // Sends a segment's descriptor to the worker before the first message that names it.
  auto map = [&](uint32_t segment) {
    if (worker->mapped.contains(segment)) return true;
    std::string message;
    put<uint8_t>(message, 4);
    message.append(3, '\0');
    put<uint32_t>(message, segment);
    put<uint64_t>(message, slots_->segment_bytes(segment));
    if (!send_message(worker->socket, message, slots_->fd(segment))) return false;
    worker->mapped.insert(segment);
    return true;
  };
  auto send = [&] {
    if (!worker->progress) {
      worker->progress = slots_->lease(sizeof(uint64_t));
      std::string message;
      put<uint8_t>(message, 6);
      message.append(3, '\0');
      put<uint32_t>(message, worker->progress->segment);
      put<uint64_t>(message, worker->progress->offset);
      if (!map(worker->progress->segment) || !send_message(worker->socket, message)) return false;
    }
    worker->reset_progress();
    if (input != nullptr && !map(input->segment)) return false;
    for (const Sent& call : sent) {
      if (!map(call.slot->segment)) return false;
    }
    return send_message(worker->socket, request);
  };
  auto lost = [&](const std::string& what, const std::string& sample) -> Error {
    const std::string name = worker->name();
    const std::string ended = retire(std::move(worker), false);
    return Error(name + " " + ended + " " + what + " " + sample + " of " + setup_.what +
                 "; another worker takes its place");
  };
  try {
    // A worker that died while idle (the OOM killer) cannot take the request: it goes to another.
    for (int attempt = 0;; ++attempt) {
      worker = take(stop);
      if (send()) {
        requests_.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      if (attempt == 1) {
        return finish(0, std::make_exception_ptr(lost("before it could be sent", samples[sent.front().call])),
                      sent.size());
      }
      retire(std::move(worker), false);
    }
  } catch (...) {
    return finish(0, std::current_exception(), sent.size());  // no worker is left, or the pipeline stopped
  }

  // Which call the worker is on, from its progress word: 2k + 1 while it makes call k of the request, 2k
  // once it made the k before it (its replies come when the request is done).
  const auto making = [&] {
    const uint64_t progress = worker->progress_now();
    return std::min<size_t>(sent.size() - 1, std::max<size_t>(replied, progress / 2));
  };
  // The call the worker was making fails with `error`; those it had made but not yet replied to, and
  // those after it, go to another worker.
  const auto fail_making = [&](size_t blamed, Error error) {
    std::vector<size_t> again;
    for (size_t i = replied; i < blamed; ++i) again.push_back(sent[i].call);
    const std::vector<size_t> rest = finish(blamed, std::make_exception_ptr(std::move(error)), blamed + 1);
    again.insert(again.end(), rest.begin(), rest.end());
    return again;
  };
  try {
    std::string reply;
    // decode.timeout is each call's: the wait ends when the worker has not moved on for that long.
    uint64_t progress = worker->progress_now();
    auto moved = Clock::now();
    while (replied < sent.size()) {
      const auto deadline = setup_.timeout.count() > 0 ? moved + setup_.timeout : Clock::time_point::max();
      const Received got = worker->receive(reply, deadline, stop);
      if (got == Received::kClosed) {
        const size_t blamed = making();
        return fail_making(blamed, lost("while making", samples[sent[blamed].call]));
      }
      if (got == Received::kStopped) {
        const std::string name = worker->name();
        const size_t at = making();
        retire(std::move(worker), true);
        return finish(replied,
                      std::make_exception_ptr(Error("the pipeline stopped while " + name + " was making " +
                                                    samples[sent[at].call])),
                      sent.size());
      }
      if (got == Received::kTimeout) {
        if (const uint64_t now = worker->progress_now(); now != progress) {
          progress = now;  // it moved on to another call: that one has its own time
          moved = Clock::now();
          continue;
        }
        const std::string name = worker->name();
        const size_t blamed = making();
        retire(std::move(worker), true);
        return fail_making(blamed, Error(name + " was still making " + samples[sent[blamed].call] + " of " +
                                         setup_.what + " after decode.timeout (" +
                                         std::to_string(setup_.timeout.count() / 1000.0) +
                                         " s): it was stopped and another started; raise decode.timeout if a "
                                         "sample may take that long"));
      }
      size_t at = 0;
      const auto status = get<uint8_t>(reply, at);
      at += 3;
      if (status == 1) {  // need: a larger slot for call `ordinal`
        const auto ordinal = get<uint32_t>(reply, at);
        const auto bytes = get<uint64_t>(reply, at);
        if (ordinal < replied || ordinal >= sent.size()) {
          throw Error(worker->name() + " asked for a slot for call " + std::to_string(ordinal) + " of " +
                      std::to_string(sent.size()));
        }
        std::shared_ptr<const Slot>& slot = sent[ordinal].slot;
        slot = slots_->lease(bytes);
        std::string message;
        put<uint8_t>(message, 2);
        message.append(3, '\0');
        put<uint32_t>(message, slot->segment);
        put<uint64_t>(message, slot->offset);
        put<uint64_t>(message, slot->capacity);
        if (!map(slot->segment) || !send_message(worker->socket, message)) {
          const size_t blamed = making();
          return fail_making(blamed, lost("while making", samples[sent[blamed].call]));
        }
        continue;
      }
      if (status != 3) throw Error(worker->name() + " sent a reply of unknown kind " + std::to_string(status));
      // Replies, each its length and then "written" or "error", to the calls in order.
      const auto replies = get<uint32_t>(reply, at);
      if (replies == 0 || replies > sent.size() - replied) {
        throw Error(worker->name() + " sent " + std::to_string(replies) + " replies for " +
                    std::to_string(sent.size() - replied) + " calls");
      }
      // The request is done: the worker goes back before its replies are read, and takes another group
      // meanwhile.
      const std::string name = worker->name();
      if (replied + replies == sent.size()) give_back(std::move(worker));
      for (uint32_t r = 0; r < replies; ++r, ++replied) {
        const auto length = get<uint32_t>(reply, at);
        if (length < 4 || length > reply.size() - at) throw Error("a worker's reply is cut short");
        const std::string_view one = std::string_view(reply).substr(at, length);
        at += length;
        const size_t k = sent[replied].call;
        calls_.fetch_add(1, std::memory_order_relaxed);
        size_t in = 0;
        const auto kind = get<uint8_t>(one, in);
        in += 3;
        if (kind == 2) {  // the user code's error: the worker went on with the next call
          results[k].error = std::make_exception_ptr(Error(
              name + ": " + (one.size() > 4 ? std::string(one.substr(4)) : std::string("(an error without a message)"))));
          continue;
        }
        if (kind != 0) throw Error(name + " sent a reply of unknown kind " + std::to_string(kind));
        uint64_t busy_ns = 0;
        results[k].fields = read_written(one, in, sent[replied].slot, name, busy_ns);
        busy_ns_.fetch_add(busy_ns, std::memory_order_relaxed);
      }
    }
  } catch (...) {
    // This process's own failure: the call it was reading fails with it, and the calls after it go to
    // another worker. A worker whose reply this process could not read is replaced (Held).
    const std::exception_ptr error = std::current_exception();
    return finish(replied, error, std::min(sent.size(), replied + 1));
  }
  return later;
}

}  // namespace ferry::detail
