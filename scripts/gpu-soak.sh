#!/usr/bin/env bash
# The soak on a GPU machine: a GPU build of ferry_soak alone, then BATCHES checked batches (10^6 unless
# given) delivered to cuda:0. Its log and JSON summary go to $OUT (or ./gpu-results). Further arguments
# go to ferry_soak (e.g. --seed 7, --seconds 500). Where the machine lacks some of ferry's Debian
# dependencies, source .deps/device-env.sh first (what .deps must hold: scripts/gpu-check.sh).
#
#   source .deps/device-env.sh; scripts/gpu-soak.sh [BATCHES] [ferry_soak options...]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
batches=${1:-1000000}
[ $# -gt 0 ] && shift
echo "=== configure ($(date +%T))"
cmake --preset gpu > "$out/soak-configure.log" 2>&1 || { tail -40 "$out/soak-configure.log"; exit 1; }
grep -E "ferry: .*build" "$out/soak-configure.log" | head -2
echo "=== build ferry_soak ($(date +%T))"
cmake --build build/gpu -j"$(nproc)" --target ferry_soak > "$out/soak-build.log" 2>&1 ||
  { grep -E "error" -A3 "$out/soak-build.log" | head -60; exit 1; }
echo "=== soak, $batches batches ($(date +%T))"
build/gpu/tests/ferry_soak --batches "$batches" --device cuda:0 --progress-seconds 30 --json "$out/soak.json" "$@" \
  > "$out/soak.log" 2>&1
status=$?
tail -n 40 "$out/soak.log"
exit $status
