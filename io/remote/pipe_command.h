#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "ferry/io/remote/stream_decoder.h"

// `pipe:COMMAND` shards: a command's standard output, read as a stream. Internal: not installed.

namespace ferry {

/// Runs `command` with /bin/sh -c (stdin /dev/null, in its own process group, killed if ferry dies) and
/// gives its standard output to `out` as it comes. Returns once it exited with status 0 after closing
/// its output. Throws ferry::Error naming the command, with its exit status or signal and the end of its
/// standard error, when it fails; when it writes nothing for `timeout` (0: no limit); and "stopped" when
/// `stop` turns true. In every case the command and its children are gone when this returns.
void run_pipe(const std::string& command, const ByteSink& out, std::chrono::milliseconds timeout,
              const std::atomic<bool>* stop);

}  // namespace ferry
