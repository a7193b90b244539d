#include "tests/stress/soak/watchdog.h"

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace ferry::soak {
namespace {

using Clock = std::chrono::steady_clock;

// Note [stacks without a debugger]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A stall report is only useful with every thread's stack, and CI machines have no debugger. Each
// thread is sent a real-time signal (tgkill) in turn; its handler walks its own stack with
// backtrace() and writes the frames with backtrace_symbols_fd(), which writes straight to the file
// descriptor without malloc. backtrace() allocates on its very first call (it loads libgcc's
// unwinder), so warm_up_backtrace() makes that call early. The dumping thread waits for each
// handler's acknowledgement (at most 2 s: a thread blocking the signal says nothing, and the
// report says so) before it signals the next one, so stacks do not interleave. Names need the
// program linked with -rdynamic (ENABLE_EXPORTS). The process ends right after, so the handler is
// never uninstalled.
std::atomic<int> dump_fd{2};
std::atomic<int> dump_acknowledged{0};

void write_text(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t wrote = ::write(fd, text.data() + done, text.size() - done);
    if (wrote <= 0) {
      if (wrote < 0 && errno == EINTR) continue;
      return;
    }
    done += static_cast<size_t>(wrote);
  }
}

void stack_handler(int) {
  const int saved_errno = errno;
  void* frames[128];
  const int count = ::backtrace(frames, 128);
  ::backtrace_symbols_fd(frames, count, dump_fd.load());
  dump_acknowledged.store(1);
  errno = saved_errno;
}

int stack_signal() { return SIGRTMIN + 5; }

pid_t this_thread_id() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

std::string thread_name(const std::string& tid) {
  std::string name;
  if (FILE* file = std::fopen(("/proc/self/task/" + tid + "/comm").c_str(), "r")) {
    char buffer[64] = {};
    if (std::fgets(buffer, sizeof buffer, file) != nullptr) name = buffer;
    std::fclose(file);
  }
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  return name;
}

std::vector<std::string> thread_ids() {
  std::vector<std::string> ids;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.') ids.emplace_back(entry->d_name);
    }
    ::closedir(dir);
  }
  return ids;
}

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = dirs.find(':', start);
    const std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
}

// gdb attached to this process, its output on `fd`; killed after `limit`.
void gdb_stacks(int fd, std::chrono::seconds limit) {
  const std::string gdb = find_on_path("gdb");
  if (gdb.empty()) {
    write_text(fd, "soak: (no gdb on the PATH: the stacks above are all)\n");
    return;
  }
  // Under Yama's ptrace_scope 1 only a process's ancestors may attach; allow any (EINVAL without Yama).
  (void)::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  const std::string pid = std::to_string(::getpid());
  std::vector<std::string> args = {
      gdb, "-nx", "-batch", "-p", pid, "-ex", "set pagination off", "-ex", "thread apply all bt"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  write_text(fd, "soak: gdb's view (" + gdb + " -p " + pid + ", thread apply all bt):\n");
  const pid_t child = ::fork();
  if (child == 0) {  // only async-signal-safe calls until exec
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (child < 0) {
    write_text(fd, "soak: fork for gdb failed: " + std::string(std::strerror(errno)) + "\n");
    return;
  }
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      write_text(fd, "soak: gdb did not finish within " + std::to_string(limit.count()) + " s: killed\n");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

void warm_up_backtrace() {
  void* frames[4];
  (void)::backtrace(frames, 4);
}

void dump_all_stacks(int fd, bool with_gdb) {
  warm_up_backtrace();
  dump_fd.store(fd);
  struct sigaction action {};
  action.sa_handler = stack_handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(stack_signal(), &action, nullptr);
  const std::vector<std::string> ids = thread_ids();
  write_text(fd, "soak: the stacks of all " + std::to_string(ids.size()) + " threads of process " +
                     std::to_string(::getpid()) + ":\n");
  const pid_t self = this_thread_id();
  for (const std::string& id : ids) {
    const pid_t tid = static_cast<pid_t>(std::strtol(id.c_str(), nullptr, 10));
    write_text(
        fd, "--- stack of thread " + id + " (" + thread_name(id) + ")" + (tid == self ? ", the watchdog" : "") + ":\n");
    if (tid == self) {
      stack_handler(0);
      continue;
    }
    dump_acknowledged.store(0);
    if (::syscall(SYS_tgkill, ::getpid(), tid, stack_signal()) != 0) {
      write_text(fd, "    (gone: " + std::string(std::strerror(errno)) + ")\n");
      continue;
    }
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (dump_acknowledged.load() == 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (dump_acknowledged.load() == 0) write_text(fd, "    (no answer within 2 s: the signal is blocked there)\n");
  }
  write_text(fd, "--- end of stacks\n");
  if (with_gdb) gdb_stacks(fd, std::chrono::seconds(30));
}

Watchdog::Watchdog(Options options) : options_(std::move(options)) {
  warm_up_backtrace();
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void Watchdog::set_activity(std::string text) {
  std::lock_guard lock(activity_mutex_);
  activity_ = std::move(text);
}

void Watchdog::loop() {
  uint64_t seen = progress_.load(std::memory_order_relaxed);
  auto moved = Clock::now();
  auto ticked = Clock::now();
  while (!stop_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const auto now = Clock::now();
    const uint64_t count = progress_.load(std::memory_order_relaxed);
    if (count != seen) {
      seen = count;
      moved = now;
    } else if (now - moved >= options_.stall) {
      stall(std::chrono::duration_cast<std::chrono::milliseconds>(now - moved));
    }
    if (options_.on_tick && now - ticked >= options_.tick) {
      ticked = now;
      options_.on_tick();
    }
  }
}

void Watchdog::stall(std::chrono::milliseconds quiet) {
  std::string activity;
  {
    std::lock_guard lock(activity_mutex_);
    activity = activity_;
  }
  write_text(options_.fd, "\nsoak: STALL: nothing moved for " + std::to_string(quiet.count() / 1000.0).substr(0, 5) +
                              " s (limit " + std::to_string(options_.stall.count() / 1000.0).substr(0, 5) +
                              " s)\nsoak: it was running " + activity + "\n");
  dump_all_stacks(options_.fd);
  if (options_.on_stall) options_.on_stall();
  write_text(options_.fd, "soak: FAILED: a stall (exit " + std::to_string(kStallExitCode) + ")\n");
  ::_exit(kStallExitCode);
}

}  // namespace ferry::soak
