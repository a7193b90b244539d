#include "ferry/pipeline/thread_start.h"

#include <pthread.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include <oneapi/tbb/global_control.h>

namespace ferry::detail {

std::string thread_limit_advice() {
  return " (a limit on threads or memory: lower decode.threads or the devices, or raise the limit: ulimit -u, "
         "ulimit -v, a container's pids limit)";
}

namespace {

// The probe threads wait here until every one has been made (or one could not be), so that they all
// exist at once, as oneTBB's workers would.
struct Gate {
  std::mutex mutex;
  std::condition_variable opened;
  bool open = false;
};

void* wait_at(void* gate_pointer) {
  auto& gate = *static_cast<Gate*>(gate_pointer);
  std::unique_lock lock(gate.mutex);
  gate.opened.wait(lock, [&] { return gate.open; });
  return nullptr;
}

}  // namespace

void check_threads_can_start(size_t count, const std::string& what) {
  pthread_attr_t attributes;
  if (::pthread_attr_init(&attributes) != 0) return;
  const size_t stack = tbb::global_control::active_value(tbb::global_control::thread_stack_size);
  if (stack != 0) ::pthread_attr_setstacksize(&attributes, stack);
  Gate gate;
  std::vector<pthread_t> made;
  made.reserve(count);
  int failure = 0;
  for (size_t i = 0; i < count; ++i) {
    pthread_t thread;
    failure = ::pthread_create(&thread, &attributes, &wait_at, &gate);
    if (failure != 0) break;
    made.push_back(thread);
  }
  ::pthread_attr_destroy(&attributes);
  {
    std::lock_guard lock(gate.mutex);
    gate.open = true;
  }
  gate.opened.notify_all();
  for (const pthread_t thread : made) ::pthread_join(thread, nullptr);
  if (failure != 0) {
    throw Error("cannot start " + what + ": only " + std::to_string(made.size()) + " of " + std::to_string(count) +
                " threads could be made: " + std::strerror(failure) + thread_limit_advice());
  }
}

}  // namespace ferry::detail
