#include "ferry/io/remote/pipe_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "ferry/io/util/printable.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

constexpr size_t kStderrKept = 2048;
constexpr int kPollMs = 50;

// The child's side: stdout and stderr to the pipes, stdin from /dev/null, its own process group, and
// death with its parent. Only async-signal-safe calls between fork and exec.
[[noreturn]] void exec_child(const std::string& command, int out, int err) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // dup2 clears the flag on fd 0
  if (null >= 0) ::dup2(null, 0);
  ::dup2(out, 1);
  ::dup2(err, 2);
  ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
  ::_exit(127);
}

}  // namespace

void run_pipe(const std::string& command, const ByteSink& out, std::chrono::milliseconds timeout,
              const std::atomic<bool>* stop) {
  const std::string what = "pipe:" + command;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw Error(what + ": cannot make a pipe: " + std::strerror(errno));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    throw Error(what + ": cannot make a pipe: " + std::strerror(errno));
  }
  const pid_t child = ::fork();
  if (child == 0) exec_child(command, out_pipe[1], err_pipe[1]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (child < 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    throw Error(what + ": cannot start it: " + std::strerror(errno));
  }
  ::setpgid(child, child);  // as the child does: whichever runs first

  std::string stderr_tail;
  std::vector<char> buffer(256 * 1024);
  std::string failure;
  std::exception_ptr sink_error;
  auto quiet_since = std::chrono::steady_clock::now();
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    if (stop != nullptr && stop->load(std::memory_order_acquire)) {
      failure = "stopped";
      break;
    }
    if (timeout.count() > 0 && std::chrono::steady_clock::now() - quiet_since > timeout) {
      failure = "wrote nothing for " + std::to_string(timeout.count()) + " ms (remote.timeout)";
      break;
    }
    pollfd fds[2] = {{out_open ? out_pipe[0] : -1, POLLIN, 0}, {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    if (::poll(fds, 2, kPollMs) < 0 && errno != EINTR) {
      failure = std::string("poll failed: ") + std::strerror(errno);
      break;
    }
    if (out_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      const ssize_t got = ::read(out_pipe[0], buffer.data(), buffer.size());
      if (got > 0) {
        quiet_since = std::chrono::steady_clock::now();
        try {
          out(buffer.data(), static_cast<size_t>(got));
        } catch (...) {
          sink_error = std::current_exception();
          break;
        }
      } else if (got == 0 || errno != EINTR) {
        out_open = false;
      }
    }
    if (err_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      char text[4096];
      const ssize_t got = ::read(err_pipe[0], text, sizeof text);
      if (got > 0) {
        quiet_since = std::chrono::steady_clock::now();
        stderr_tail.append(text, static_cast<size_t>(got));
        if (stderr_tail.size() > kStderrKept) stderr_tail.erase(0, stderr_tail.size() - kStderrKept);
      } else if (got == 0 || errno != EINTR) {
        err_open = false;
      }
    }
  }
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  if (!failure.empty() || sink_error) ::kill(-child, SIGKILL);
  // Its output is closed; it may still linger (or a child of its holds nothing): the same limits apply.
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child || (done < 0 && errno != EINTR)) break;
    const bool stopped = stop != nullptr && stop->load(std::memory_order_acquire);
    if (stopped || (timeout.count() > 0 && std::chrono::steady_clock::now() - quiet_since > timeout)) {
      if (failure.empty() && !sink_error) failure = stopped ? "stopped" : "did not exit after closing its output";
      ::kill(-child, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (sink_error) std::rethrow_exception(sink_error);
  const auto tail = [&stderr_tail] {
    while (!stderr_tail.empty() && (stderr_tail.back() == '\n' || stderr_tail.back() == ' ')) stderr_tail.pop_back();
    return stderr_tail.empty() ? std::string("; it wrote nothing to stderr")
                               : "; its stderr ends: " + printable(stderr_tail, kStderrKept);
  };
  if (!failure.empty()) throw Error(what + ": " + failure + (failure == "stopped" ? "" : tail()));
  if (WIFSIGNALED(status)) {
    throw Error(what + ": killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) +
                ")" + tail());
  }
  if (WEXITSTATUS(status) != 0) {
    throw Error(what + ": exited with status " + std::to_string(WEXITSTATUS(status)) +
                (WEXITSTATUS(status) == 127 ? " (command not found?)" : "") + tail());
  }
}

}  // namespace ferry
