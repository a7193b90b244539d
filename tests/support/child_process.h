#pragma once

// A program run as a child process, as a user runs it: its stdout and stderr captured on separate
// pipes (or its stdout into a file), its exit status checked. Every wait has a deadline and a child
// still running at the deadline is killed, so a hang fails the test instead of stalling it.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace ferry::testing {

using Clock = std::chrono::steady_clock;

/// How a child ended.
struct ExitStatus {
  bool exited = false;  // by exit(): `code` holds the status
  int code = -1;
  int signal = 0;  // killed by this signal (0: not)
  bool timed_out = false;

  bool is(int expected) const { return exited && code == expected; }
  std::string describe() const;
};

std::ostream& operator<<(std::ostream& out, const ExitStatus& status);

/// One child process with its stdout and stderr on pipes (stdin is /dev/null). Owns the child: the
/// destructor kills one still running and reaps it. Used by one thread.
class Child {
 public:
  /// Starts `argv` (argv[0] a path) with default signal handling and nothing blocked. `stdout_path`:
  /// its standard output goes to that file (created or truncated) instead of a pipe. Throws
  /// std::runtime_error when it cannot be started.
  explicit Child(const std::vector<std::string>& argv, const std::string& stdout_path = "");
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

  /// Reads the pipes until `done(stderr so far)` holds (true), or both pipes end or the deadline
  /// passes (false). Blocks.
  bool read_until(const std::function<bool(const std::string&)>& done, Clock::time_point deadline);
  /// Waits for the child to end, reading its pipes meanwhile; kills it at the deadline. Returns how it
  /// ended and when (steady clock, within a few milliseconds). Blocks.
  std::pair<ExitStatus, Clock::time_point> wait(Clock::time_point deadline);

 private:
  static void close_fd(int& fd);
  // One poll of the open pipes, up to `timeout_ms`; appends what arrived, closes a pipe at its end.
  void pump(int timeout_ms);

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_;
  std::string err_;
  std::optional<ExitStatus> status_;
};

struct Result {
  ExitStatus status;
  std::string out;
  std::string err;
};

/// Runs a program to its end, or kills it at the deadline. `stdout_path`: as for Child.
Result run_program(const std::vector<std::string>& argv, Clock::duration deadline, const std::string& stdout_path = "");

}  // namespace ferry::testing
