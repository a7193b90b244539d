#pragma once

#include <cstddef>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "ferry/pipeline/error.h"

// Threads that may not be made: a container's limit on processes (its pids cgroup), `ulimit -u`, or a
// limit on memory (each thread's stack) makes pthread_create fail. A std::thread then throws
// std::system_error ("Resource temporarily unavailable"), and a oneTBB worker that fails to make the
// next worker ends the process (std::terminate). Both become a ferry::Error that says which threads
// could not be made and what to change. Internal: not installed.

namespace ferry::detail {

/// What a failed pthread_create asks of the user, after "cannot start <what>: <why>".
std::string thread_limit_advice();

/// std::thread(body), or a ferry::Error "cannot start <what>: <errno's message> (...advice)".
template <typename Body>
std::thread start_thread(const std::string& what, Body&& body) {
  try {
    return std::thread(std::forward<Body>(body));
  } catch (const std::system_error& e) {
    throw Error("cannot start " + what + ": " + e.code().message() + thread_limit_advice());
  }
}

/// Makes sure that `count` more threads can exist at once, each with oneTBB's stack size, by making
/// them (they wait for one another, then end) before oneTBB does: where that fails, oneTBB would end
/// the process. Throws ferry::Error "cannot start <what>: only K of N threads could be made: ...".
/// Takes a few milliseconds for a few hundred threads.
void check_threads_can_start(size_t count, const std::string& what);

}  // namespace ferry::detail
