#!/usr/bin/env bash
# The whole GPU check, for a machine with an NVIDIA GPU: configure a GPU build (fails unless the CUDA
# toolkit and a CUDA-enabled libtorch are found), build, run every test, compute-sanitizer over the cuda
# tests, then `ferry info --bandwidth`, the demo, every shipped config, the C++ and Python examples and
# the benchmarks. Logs and results go to $OUT (or ./gpu-results).
#
#   source .deps/device-env.sh; scripts/gpu-check.sh [--no-bench] [--no-sanitize] [--no-tests] [--only=NAME,...]
#
# .deps (ignored by git) is for a GPU machine that lacks some of ferry's Debian dependencies: .deps/debs
# holds their .deb files (libtbb-dev and its libraries, libconcurrentqueue-dev, libturbojpeg0-dev,
# libturbojpeg0, libwebp-dev and libwebp7, libjemalloc2, libjemalloc-dev: `apt-get download` them on a
# Debian 12 machine), and
# .deps/device-env.sh unpacks them and exports CMAKE_PREFIX_PATH (with the CUDA-enabled torch's
# torch.utils.cmake_prefix_path), LD_LIBRARY_PATH and CPATH. A machine that has them needs neither.
#
# --no-sanitize skips the compute-sanitizer step (memcheck, racecheck and synccheck over every binary
# of cuda-labelled tests; a few minutes). --no-tests skips ctest.
#
# The whole check takes more than 10 minutes (on one H200 with 16 cores: configure and build 2 minutes,
# ctest about 7, then the sanitizer and the benchmarks). Where one command may run only so long, run it
# in parts on the same machine (the build is kept, so later parts only check it):
#   scripts/gpu-check.sh --no-bench --no-sanitize     # build and every test
#   scripts/gpu-check.sh --no-tests --no-bench        # compute-sanitizer
#   scripts/gpu-check.sh --no-tests --no-sanitize --only=runs,transfer,loaders,python_iteration,start_copy
#   scripts/gpu-check.sh --no-tests --no-sanitize --only=jpeg_decode,latency,overlap,augment,ddp,ddp_scaling
#   scripts/gpu-check.sh --no-tests --no-sanitize --only=remote
# ferry's programs link jemalloc where configure finds it (cmake/FerryMalloc.cmake): with .deps, only if
# .deps/debs holds Debian's libjemalloc2 and libjemalloc-dev; configure's "programs' malloc" line says
# which malloc the build got.
# --only=NAME,... runs only those of the runs (info, demo, configs, examples: "runs") and benchmarks
# (transfer, loaders, python_iteration, python_dataset, start_copy, jpeg_decode, latency, overlap, augment, ddp,
# ddp_scaling, remote; ddp, python/tests/test_ddp.py with a rank on every GPU, only where there are more than 2;
# ddp_scaling at 1, 2, 4 ... GPUs, only where there are 2 or more; remote needs nginx: Debian's `nginx` .deb in
# .deps/debs does, as /opt/ferry-deps/usr/sbin/nginx). All the benchmarks together take longer than 10
# minutes too, hence the two groups above.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
bench=1
sanitize=1
tests=1
only=""
for arg in "$@"; do
  case "$arg" in
    --no-bench) bench=0 ;;
    --no-sanitize) sanitize=0 ;;
    --no-tests) tests=0 ;;
    --only=*) only=${arg#--only=} ;;
    *) echo "gpu-check: unknown option $arg" >&2; exit 2 ;;
  esac
done
for name in ${only//,/ }; do
  case "$name" in
    runs|transfer|loaders|python_iteration|python_dataset|start_copy|jpeg_decode|latency|overlap|augment|ddp|ddp_scaling|remote) ;;
    *) echo "gpu-check: --only: no step named $name" >&2; exit 2 ;;
  esac
done
status=0
step() { echo "=== $* ($(date +%T))"; }
# Whether the benchmark (or the runs) named $1 is asked for: all of them without --only.
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

step configure
# The Python package must build too, for the Python whose torch is the CUDA-enabled libtorch.
cmake --preset gpu -DFERRY_BUILD_PYTHON=ON > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
grep -E "ferry: |Torch|CUDA" "$out/configure.log" | head -6

step build
cmake --build build/gpu -j"$(nproc)" > "$out/build.log" 2>&1 || { grep -E "error|Error" -A3 "$out/build.log" | head -60; exit 1; }
grep -c "warning:" "$out/build.log" | sed 's/^/warnings: /'

if [ "$tests" = 1 ]; then
  step ctest
  ctest --test-dir build/gpu -j10 --output-on-failure --timeout 600 > "$out/ctest.log" 2>&1 || status=1
  grep -E "tests passed|tests failed|Failed|\*\*\*|Skipped" "$out/ctest.log" | head -40
  sed -n '/Label Time Summary/,/^$/p' "$out/ctest.log"
fi

if [ "$sanitize" = 1 ]; then
  # Every binary that holds cuda-labelled tests, whole, under each tool: memcheck (out-of-bounds and
  # misaligned device accesses), racecheck (shared-memory races in ferry's kernels) and synccheck
  # (invalid barriers). A finding fails the step (--error-exitcode). libtorch's caching allocator is
  # off (PYTORCH_NO_CUDA_MEMORY_CACHING) so that every tensor is an allocation of its own: an access
  # past one is then outside any allocation, where memcheck sees it. memcheck does not report API
  # errors (tests provoke some on purpose, an invalid device ordinal, and ferry checks every runtime
  # call itself, so a real one fails its test anyway) nor leaks (device memory is checked by
  # FaultInjectionCuda.AThousandGpuPipelinesLeaveNoDeviceMemoryBehind).
  step "compute-sanitizer over the cuda tests"
  binaries=$(grep -oP 'ferry_test\(\K\w+(?= LABEL cuda)' tests/CMakeLists.txt | sed 's|^|build/gpu/tests/|')
  for tool in memcheck racecheck synccheck; do
    for binary in $binaries; do
      name="$tool-$(basename "$binary")"
      extra=()
      [ "$tool" = memcheck ] && extra=(--report-api-errors no)
      if PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 "$binary" > "$out/sanitizer-$name.log" 2>&1; then
        echo "$name: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|tests? from .* ran|PASSED|SKIPPED" "$out/sanitizer-$name.log" | tr '\n' ' ')"
      else
        status=1
        echo "$name: FAILED"; grep -E "ERROR SUMMARY|=========  |FAILED" "$out/sanitizer-$name.log" | head -20
      fi
    done
  done
fi

if [ "$bench" = 1 ]; then
  if want runs; then
    step info
    ./build/gpu/cli/ferry info --bandwidth 2>&1 | tee "$out/info.txt" || status=1

    step demo
    ./build/gpu/cli/ferry run --report "$out/demo.json" > "$out/demo.txt" 2>&1 || status=1
    tail -24 "$out/demo.txt"

    step "shipped configs (ferry run, device auto = cuda:0)"
    ./build/gpu/cli/ferry make-dataset tokens build/gpu/data/tokens --documents 20000 || status=1
    rm -rf build/gpu/data/shards build/gpu/data/images
    ./build/gpu/cli/ferry make-dataset tar build/gpu/data/shards --samples 4000 || status=1
    ./build/gpu/cli/ferry make-dataset images build/gpu/data/images --samples 4000 || status=1
    for config in configs/*.yaml; do
      name=$(basename "$config" .yaml)
      extra=()
      [ "$name" = megatron ] && extra=(--set source.prefix=build/gpu/data/tokens)
      [ "$name" = tar ] && extra=(--set "source.shards=build/gpu/data/shards/shard-{000000..000003}.tar")
      [ "$name" = image-folder ] && extra=(--set source.root=build/gpu/data/images)
      [ "$name" = imagenet-train ] && extra=(--set source.root=build/gpu/data/images)
      ./build/gpu/cli/ferry run "$config" "${extra[@]}" --set stats.progress=off --report "$out/config-$name.json" > "$out/config-$name.txt" 2>&1 || status=1
      echo "--- $name"; grep -E "delivered|rate|start |bottleneck|pool" "$out/config-$name.txt"
    done

    step example
    ./build/gpu/examples/train 2 > "$out/train.txt" 2>&1 || status=1
    tail -2 "$out/train.txt"
    PYTHONPATH=build/gpu/python python3 examples/python/train.py 2 > "$out/train-python.txt" 2>&1 || status=1
    tail -1 "$out/train-python.txt"
  fi

  if want transfer; then
    step bench/transfer
    ./build/gpu/bench/transfer --json "$out/transfer.json" > "$out/transfer.txt" 2>&1 || status=1
    cat "$out/transfer.txt"
    step "bench/transfer --prefetch 6"
    ./build/gpu/bench/transfer --prefetch 6 --json "$out/transfer-prefetch6.json" > "$out/transfer-prefetch6.txt" 2>&1 || status=1
    grep -E "^[a-d]\)|link|pack alone" "$out/transfer-prefetch6.txt"
  fi
  if want loaders; then
    step "bench/loaders.py (ferry vs torch DataLoader; makes build/gpu/bench-data first)"
    python3 bench/loaders.py --ferry ./build/gpu/cli/ferry --data build/gpu/bench-data --device cuda --out "$out/loaders" \
      2> "$out/loaders.log" | tee "$out/loaders.txt" || { status=1; tail -20 "$out/loaders.log"; }
  fi
  if want python_dataset; then
    step "bench/python_dataset.py (a Python Dataset through ferry's workers vs torch DataLoader)"
    PYTHONPATH=build/gpu/python python3 bench/python_dataset.py --out "$out/python-dataset" 2>&1 | tee "$out/python-dataset.txt" || status=1
  fi
  if want python_iteration; then
    step "bench/python_iteration.py (Python iteration vs the C++ iterator)"
    PYTHONPATH=build/gpu/python python3 bench/python_iteration.py --out "$out/python-iteration" 2>&1 | tee "$out/python-iteration.txt" || status=1
  fi
  if want start_copy; then
    step "bench/start_copy.py (start_copy vs .to() per tensor and cat + one copy)"
    PYTHONPATH=build/gpu/python python3 bench/start_copy.py --out "$out/start-copy" 2>&1 | tee "$out/start-copy.txt" || status=1
  fi
  if want jpeg_decode; then
    step "bench/jpeg_decode (libjpeg-turbo per thread, and nvJPEG's hardware alone)"
    # bench/loaders.py's image folder when it ran; else a folder of its own (loaders.py owns its folder).
    jpegs=build/gpu/bench-data/images
    if [ ! -d "$jpegs" ]; then
      jpegs=build/gpu/data/jpeg-bench
      [ -d "$jpegs" ] || ./build/gpu/cli/ferry make-dataset images "$jpegs" --samples 8192 > /dev/null || status=1
    fi
    ./build/gpu/bench/jpeg_decode "$jpegs" --json "$out/jpeg_decode.json" 2>&1 | tee "$out/jpeg_decode.txt" || status=1
  fi
  if want latency; then
    step "bench/latency (the per-batch cost of small batches vs a plain copy loop)"
    ./build/gpu/bench/latency --json "$out/latency.json" 2>&1 | tee "$out/latency.txt" || status=1
  fi
  if want overlap; then
    step "bench/overlap.py (time a training loop waits in next(), simulated 1/5/20 ms steps)"
    PYTHONPATH=build/gpu/python python3 bench/overlap.py --ferry ./build/gpu/cli/ferry --data build/gpu/bench-data \
      --out "$out/overlap" 2>&1 | tee "$out/overlap.txt" || status=1
  fi
  if want augment; then
    step "bench/augment.py (training-ready image batches: ferry vs DataLoader + torchvision v2 vs torchvision's GPU decoder)"
    python3 bench/augment.py --ferry ./build/gpu/cli/ferry --data build/gpu/bench-data --device cuda \
      --out "$out/augment" 2> "$out/augment.log" | tee "$out/augment.txt" || { status=1; tail -20 "$out/augment.log"; }
  fi
  gpus=$(nvidia-smi --list-gpus | wc -l)
  if want ddp && [ "$gpus" -gt 2 ]; then  # the suite's python.test_ddp runs 2 ranks
    step "python/tests/test_ddp.py on all $gpus GPUs (a rank each, NCCL)"
    PYTHONPATH=build/gpu/python FERRY_SOURCE_DIR=$PWD FERRY_DDP_RANKS=$gpus python3 -m pytest -q -p no:cacheprovider \
      python/tests/test_ddp.py > "$out/ddp.txt" 2>&1 || status=1
    tail -3 "$out/ddp.txt"
  fi
  if want ddp_scaling && [ "$gpus" -ge 2 ]; then
    counts=1  # 1, 2, 4, 8 ... up to the machine's GPUs
    for ((n = 2; n <= gpus; n *= 2)); do counts+=",$n"; done
    step "bench/ddp_scaling.py (one ferry per rank, one ferry process for all GPUs, one DataLoader per rank; $counts GPUs)"
    PYTHONPATH=build/gpu/python python3 bench/ddp_scaling.py --ferry ./build/gpu/cli/ferry --data build/gpu/bench-data \
      --gpus "$counts" --out "$out/ddp-scaling" 2> "$out/ddp-scaling.log" | tee "$out/ddp-scaling.txt" ||
      { status=1; tail -20 "$out/ddp-scaling.log"; }
  fi
  if want remote; then
    step "bench/remote.py (tar shards from nginx over 0/20/100 ms and 1/10 Gbit/s links beside the local disk; caches of 100% and 50%)"
    [ -x /opt/ferry-deps/usr/sbin/nginx ] && export FERRY_NGINX=${FERRY_NGINX:-/opt/ferry-deps/usr/sbin/nginx}
    python3 bench/remote.py --ferry ./build/gpu/cli/ferry --threads 8 --data build/gpu/bench-data/remote \
      --out "$out/remote" 2> "$out/remote.log" | tee "$out/remote.txt" || { status=1; tail -20 "$out/remote.log"; }
  fi
fi
step "done (status $status)"
exit $status
