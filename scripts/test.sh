#!/usr/bin/env bash
# Every test: installs what is missing, builds everything (release preset) and runs CTest — unit,
# integration, stress and cuda tests (the cuda ones skip, saying why, where there is no GPU). Then the
# concurrency core (queues, pools, the batch cutter, pipelines, on_error, fault injection, the routing of
# samples between the CPU threads and the GPU decoder, pipeline groups, sample transforms, the shard cache,
# the trace, the parallel copies) again under ThreadSanitizer (scripts/test-tsan.sh; about 20 minutes on 2 cores from a fresh
# clone, 2 of them testing).
# Extra arguments go to ctest (e.g. -L unit) and skip the ThreadSanitizer part, as FERRY_TSAN=0 does.
# The two tests labelled `rebuild` (package.subdirectory, python.pip_install) compile ferry again from
# source, about 8 minutes of 2 cores each, which would take a fresh-clone run past an hour: they run
# with FERRY_REBUILD_TESTS=1, or as `ctest --preset release -L rebuild`.
# scripts/test-under-load.sh runs the suite with more tests at once than cores, each repeated.
# FERRY_PRESET=debug-asan runs the suite under AddressSanitizer and UBSan instead of release.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
preset=${FERRY_PRESET:-release}
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$(nproc)"
skip=()
if [ $# -eq 0 ] && [ "${FERRY_REBUILD_TESTS:-0}" != 1 ]; then skip=(-LE rebuild); fi
ctest --preset "$preset" "${skip[@]}" "$@"
if [ "$preset" = release ] && [ $# -eq 0 ] && [ "${FERRY_TSAN:-1}" = 1 ]; then
  # The instrumented libtbb is built from the Debian source of the installed libtbb-dev: where the
  # dependencies come from elsewhere (CMAKE_PREFIX_PATH) there is none.
  if ! dpkg-query -W -f='${Status}' libtbb-dev 2> /dev/null | grep -q "install ok installed"; then
    echo "ferry: the ThreadSanitizer part is skipped: it needs Debian's libtbb-dev (scripts/test-tsan.sh says why)"
    exit 0
  fi
  echo "ferry: the concurrency core under ThreadSanitizer"
  FERRY_TSAN_TARGETS="bounded_queue_test bounded_queue_stress_test pinned_pool_test batch_cutter_test pipeline_test on_error_skip_test fault_injection_test decode_routing_test auto_decode_choice_test pipeline_group_test extensions_test shard_cache_test trace_test parallel_copy_test" \
    scripts/test-tsan.sh -R '^(BoundedQueue|BoundedQueueStress|PinnedPool|PoolOptions|BatchCutter|Pipeline|PipelineOrder|OnErrorSkip|FaultInjection|DecodeThreads/GpuDecodeRouting|AutoDecodeChoice|PipelineGroup|Extensions|ShardCache|Trace|ParallelCopy)\.'
fi
