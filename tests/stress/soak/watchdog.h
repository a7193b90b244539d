#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace ferry::soak {

/// Fails a process that stopped moving. In: a progress counter that the watched code bumps
/// (progress()), a stall limit, and the file descriptor to report on. Out: when the counter has not
/// changed for `stall` it writes what the process was doing (activity()), every thread's stack
/// (dump_all_stacks()), runs `on_stall` (e.g. to write a summary) and ends the process with
/// kStallExitCode, without running destructors (a hung pipeline's would hang too).
///
/// Its own thread checks four times a second; on_tick runs there every `tick` (progress lines).
/// progress() and set_activity() are thread-safe and cheap (an atomic add; a short lock).
class Watchdog {
 public:
  static constexpr int kStallExitCode = 3;

  struct Options {
    std::chrono::milliseconds stall{30000};
    int fd = 2;
    std::chrono::milliseconds tick{5000};
    std::function<void()> on_tick;   // on the watchdog's thread
    std::function<void()> on_stall;  // on the watchdog's thread, after the stacks, before the exit
  };

  explicit Watchdog(Options options);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void progress() noexcept { progress_.fetch_add(1, std::memory_order_relaxed); }
  /// Stops watching (and ticking); joins its thread. Idempotent; the destructor calls it.
  void stop();
  /// What the process is doing now, for the stall report ("round 17: ...").
  void set_activity(std::string text);

 private:
  void loop();
  void stall(std::chrono::milliseconds quiet);

  Options options_;
  std::atomic<uint64_t> progress_{0};
  std::atomic<bool> stop_{false};
  std::mutex activity_mutex_;
  std::string activity_;
  std::thread thread_;
};

/// Writes every thread's stack to `fd`: for each thread of /proc/self/task, a header with its id
/// and name, then its frames, from a real-time signal's handler on that thread (backtrace() and
/// backtrace_symbols_fd(), which neither allocate nor lock once warmed up: Note [stacks without a
/// debugger] in watchdog.cpp). Then, where gdb is on the PATH and `with_gdb`, gdb's "thread apply
/// all bt" of the process (better symbols; at most 30 s). Call it from one thread at a time; the
/// process is expected to end soon after (the handler stays installed).
void dump_all_stacks(int fd, bool with_gdb = true);

/// Loads what backtrace() needs (libgcc's unwinder) now, so that the first call from a signal
/// handler does not allocate. Called by Watchdog's constructor.
void warm_up_backtrace();

}  // namespace ferry::soak
