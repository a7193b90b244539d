#include "tests/support/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ferry::testing {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string ExitStatus::describe() const {
  if (timed_out) return "still running at the deadline (killed)";
  if (exited) return "exit " + std::to_string(code);
  if (signal != 0) return std::string("killed by signal ") + strsignal(signal);
  return "unknown";
}

std::ostream& operator<<(std::ostream& out, const ExitStatus& status) { return out << status.describe(); }

Child::Child(const std::vector<std::string>& argv, const std::string& stdout_path) {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (stdout_path.empty()) {
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  } else {
    posix_spawn_file_actions_addopen(&actions, 1, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  // The child starts with default signal handling and nothing blocked, whatever this process has.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGTERM);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const int error = ::posix_spawn(&pid_, argv.at(0).c_str(), &actions, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  if (error != 0) {
    pid_ = -1;
    throw std::runtime_error("posix_spawn " + argv.at(0) + ": " + std::strerror(error));
  }
}

Child::~Child() {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  close_fd(out_fd_);
  close_fd(err_fd_);
}

bool Child::read_until(const std::function<bool(const std::string&)>& done, Clock::time_point deadline) {
  while (!done(err_)) {
    if (out_fd_ < 0 && err_fd_ < 0) return false;
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return false;
    pump(static_cast<int>(std::min<int64_t>(std::chrono::duration_cast<milliseconds>(left).count() + 1, 100)));
  }
  return true;
}

std::pair<ExitStatus, Clock::time_point> Child::wait(Clock::time_point deadline) {
  for (;;) {
    int status = 0;
    const pid_t reaped = ::waitpid(pid_, &status, WNOHANG);
    if (reaped == pid_) {
      const Clock::time_point ended = Clock::now();
      // What it wrote before it ended is in the pipes still. A process it left behind could hold
      // their write ends open, so this read has a deadline too.
      while ((out_fd_ >= 0 || err_fd_ >= 0) && Clock::now() < ended + seconds(10)) pump(100);
      ExitStatus result;
      result.exited = WIFEXITED(status);
      result.code = result.exited ? WEXITSTATUS(status) : -1;
      result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      status_ = result;
      return {result, ended};
    }
    if (Clock::now() >= deadline) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      ExitStatus result;
      result.timed_out = true;
      status_ = result;
      return {result, Clock::now()};
    }
    if (out_fd_ >= 0 || err_fd_ >= 0) {
      pump(2);
    } else {
      std::this_thread::sleep_for(milliseconds(2));
    }
  }
}

void Child::close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// One poll of the open pipes, up to `timeout_ms`; appends what arrived, closes a pipe at its end.
void Child::pump(int timeout_ms) {
  std::array<pollfd, 2> fds{};
  nfds_t count = 0;
  if (out_fd_ >= 0) fds[count++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) fds[count++] = {err_fd_, POLLIN, 0};
  if (count == 0) return;
  if (::poll(fds.data(), count, timeout_ms) <= 0) return;
  for (nfds_t i = 0; i < count; ++i) {
    if (fds[i].revents == 0) continue;
    int& fd = fds[i].fd == out_fd_ ? out_fd_ : err_fd_;
    std::string& text = fds[i].fd == out_fd_ ? out_ : err_;
    char buffer[4096];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      text.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      close_fd(fd);
    }
  }
}

Result run_program(const std::vector<std::string>& argv, Clock::duration deadline, const std::string& stdout_path) {
  Child child(argv, stdout_path);
  const ExitStatus status = child.wait(Clock::now() + deadline).first;
  return {status, child.out(), child.err()};
}

}  // namespace ferry::testing
