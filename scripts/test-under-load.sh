#!/usr/bin/env bash
# The suite on a loaded machine: four times as many tests at once as there are cores, each test repeated
# until it fails (three runs by default), so that a test that passes only on an idle machine shows. Builds
# the release preset first (scripts/test.sh installs what is missing); extra arguments go to ctest.
#
#   scripts/test-under-load.sh                  # every test but the package builds, 3 runs each
#   FERRY_LOAD_REPEAT=10 scripts/test-under-load.sh -L unit
#
# FERRY_LOAD_JOBS sets the tests at once (default: 4 x the cores), FERRY_LOAD_REPEAT the runs of each.
# The package tests (package.*, python.pip_install) build a project each: left out unless asked for
# (-R 'package'), as they measure the compiler rather than ferry. Prints ctest's summary; the exit
# status is ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${FERRY_PRESET:-release}
jobs=${FERRY_LOAD_JOBS:-$(($(nproc) * 4))}
repeat=${FERRY_LOAD_REPEAT:-3}
if [ ! -f "build/$preset/CMakeCache.txt" ]; then
  scripts/install-deps.sh
  cmake --preset "$preset"
fi
cmake --build --preset "$preset" -j "$(nproc)"
args=("$@")
if [ ${#args[@]} -eq 0 ]; then args=(-E '^(package\.|python\.pip_install$)'); fi
echo "ferry: the suite under load: $jobs tests at once on $(nproc) cores, each run up to $repeat times"
exec ctest --preset "$preset" -j "$jobs" --repeat "until-fail:$repeat" "${args[@]}"
