#!/usr/bin/env bash
# ferry's main job on its built-in default: installs what is missing, builds the `ferry` command
# (release preset) and runs the demo pipeline — synthetic data delivered to the GPU if there is one,
# with progress and a report. Arguments go to `ferry run` (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
preset=${FERRY_PRESET:-release}
cmake --preset "$preset" > build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
grep "ferry: " build-configure.log
rm -f build-configure.log
cmake --build --preset "$preset" --target ferry_cli
exec "build/$preset/cli/ferry" run "$@"
