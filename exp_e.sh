#!/bin/bash
source .deps/device-env.sh >/dev/null
L=/opt/ferry-deps/usr/lib/x86_64-linux-gnu
for lib in curl zstd lzma z; do real=$(ls /usr/lib/x86_64-linux-gnu/lib$lib.so.[0-9] 2>/dev/null | head -1); [ -n "$real" ] && [ ! -e "$L/lib$lib.so" ] && ln -sfn "$real" "$L/lib$lib.so"; done
mkdir -p /tmp/ferry-build && { [ -L build ] || { rm -rf build; ln -sfn /tmp/ferry-build build; }; }
t0=$(date +%s)
scripts/gpu-check.sh --no-bench --no-sanitize --no-tests > /tmp/gpucheck.log 2>&1 || { tail -30 /tmp/gpucheck.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
mkdir -p /tmp/tok && ./build/gpu/cli/ferry make-dataset tokens /tmp/tok/tokens --documents 40000 > /dev/null
P=/tmp/tok/tokens; echo "dataset $(( $(date +%s) - t0 )) s"
for round in 1 2 3 4; do for tr in off on; do
  extra=""; [ $tr = on ] && extra="--set stats.trace=/tmp/trace-$round.json"
  timeout 25 ./build/gpu/cli/ferry run configs/megatron.yaml --batches 16000 --report /tmp/r.json --set stats.progress=off --set "source.prefix=$P" --set transfer.device=cuda --set decode.threads=16 --set sampler.epochs=1000 $extra > /dev/null 2>&1
  python3 -c "
import json;t=json.load(open('/tmp/r.json'))['totals'];print('round $round trace $tr', round(t['samples_per_second']), t['batches'])" | tee -a $OUT/trace-cost.txt
done; done
ls -la /tmp/trace-1.json | tee -a $OUT/trace-cost.txt
echo "done $(( $(date +%s) - t0 )) s"
