#!/usr/bin/env bash
# The suite under ThreadSanitizer (the tsan preset): builds oneTBB's libtbb with TSan once
# (scripts/build-tsan-tbb.sh), builds ferry with TSan and runs CTest. Extra arguments go to ctest,
# e.g. -L unit or -R 'BoundedQueue|Pipeline'. On 2 cores the whole suite builds in about 40 minutes
# and runs in about 30.
#
#   FERRY_TSAN_TARGETS="bounded_queue_test pipeline_test" scripts/test-tsan.sh -R '...'
#
# builds only those targets (CI's subset): give a -R or -L that selects only their tests, since the
# binaries not built show up as failing <binary>_NOT_BUILT tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build-tsan-tbb.sh
cmake --preset tsan
if [ -n "${FERRY_TSAN_TARGETS:-}" ]; then
  # shellcheck disable=SC2086  # a list of target names
  cmake --build --preset tsan -j "$(nproc)" --target $FERRY_TSAN_TARGETS
else
  cmake --build --preset tsan -j "$(nproc)"
fi
# gcc 12's TSan runtime refuses more than 28 bits of mmap randomisation ("unexpected memory
# mapping"); setarch -R turns randomisation off for the run where the kernel uses more.
run=()
if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2> /dev/null || echo 28)" -gt 28 ]; then run=(setarch "$(uname -m)" -R); fi
"${run[@]}" ctest --preset tsan "$@"
