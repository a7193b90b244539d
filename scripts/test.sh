#!/usr/bin/env bash
# Every test: installs what is missing, builds everything (release preset) and runs CTest — unit,
# integration, stress and cuda tests (the cuda ones skip, saying why, where there is no GPU).
# Extra arguments go to ctest (e.g. -L unit). FERRY_PRESET=debug-asan runs them under sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
preset=${FERRY_PRESET:-release}
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset" "$@"
