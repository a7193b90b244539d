#!/usr/bin/env bash
# Before and after on one machine, for performance work: builds BASELINE (another checkout of ferry,
# e.g. `git worktree add ../ferry-base main` or an unpacked `git archive`) and this tree, then runs
# bench/transfer and bench/loaders.py for each, alternating, ROUNDS times, and prints each figure's
# median for both. Results (every run's JSON and a summary) go to $OUT, or ./bench-ab.
#
#   source .deps/device-env.sh   # on a GPU machine that takes dependencies from .deps (docs/reliability.md)
#   scripts/bench-ab.sh BASELINE [ROUNDS] [--no-loaders] [--loaders-args "..."] [--data DIR]
#
# The two builds use the same compiler, preset (gpu where it can be one, else release) and flags, and
# FERRY_MALLOC from the environment (default AUTO). A baseline older than that option keeps glibc's
# malloc: compare against it with FERRY_MALLOC=SYSTEM, or the malloc is measured along with the change
# (each run's report and `ferry info` name it).
# loaders.py comes from this tree for both (it drives the `ferry` binary it is given).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,12p' "$0"; exit 2; }
baseline=$(cd "$1" && pwd) || exit 2
shift
rounds=3
loaders=1
data=""  # loaders.py's datasets (made once, then kept); default $out/data
loaders_args=(--threads 4,16 --token-threads 16)
while [ $# -gt 0 ]; do
  case "$1" in
    --no-loaders) loaders=0 ;;
    --loaders-args) read -r -a loaders_args <<< "$2"; shift ;;
    --data) data=$2; shift ;;
    *) rounds=$1 ;;
  esac
  shift
done
out=${OUT:-$PWD/bench-ab}
mkdir -p "$out"
data=${data:-$out/data}
preset=release
command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1 && preset=gpu
device=cpu
[ "$preset" = gpu ] && device=cuda

build() {  # build TREE NAME
  echo "=== build $2 ($1, preset $preset, $(date +%T))"
  (cd "$1" && cmake --preset "$preset" -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_PYTHON=OFF \
     -DFERRY_MALLOC="${FERRY_MALLOC:-AUTO}" > "$out/configure-$2.log" 2>&1 &&
     cmake --build "build/$preset" -j"$(nproc)" --target transfer ferry_cli > "$out/build-$2.log" 2>&1) ||
    { tail -30 "$out/build-$2.log" "$out/configure-$2.log" 2> /dev/null; exit 1; }
}
build "$baseline" before
build "$PWD" after

for round in $(seq 1 "$rounds"); do
  for side in before after; do
    tree=$([ "$side" = before ] && echo "$baseline" || echo "$PWD")
    echo "=== round $round: bench/transfer $side ($(date +%T))"
    "$tree/build/$preset/bench/transfer" --device "$device" --json "$out/transfer-$side-$round.json" \
      > "$out/transfer-$side-$round.txt" 2>&1 || echo "transfer $side failed: see $out/transfer-$side-$round.txt"
    if [ "$loaders" = 1 ]; then
      echo "=== round $round: bench/loaders.py $side ($(date +%T))"
      python3 bench/loaders.py --ferry "$tree/build/$preset/cli/ferry" --data "$data" --device "$device" \
        --out "$out/loaders-$side-$round" "${loaders_args[@]}" > "$out/loaders-$side-$round.txt" 2>&1 ||
        echo "loaders.py $side failed: see $out/loaders-$side-$round.txt"
    fi
  done
done

python3 - "$out" "$rounds" << 'PY'
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
rows = {}
for side in ("before", "after"):
    for r in range(1, rounds + 1):
        t = load(os.path.join(out, f"transfer-{side}-{r}.json"))
        if t:
            rows.setdefault("transfer: link limit GB/s", {}).setdefault(side, []).append(t.get("link_gbps", 0))
            for case in t.get("cases", []):
                key = f"transfer: {case['case']} ferry GB/s"
                rows.setdefault(key, {}).setdefault(side, []).append(case["ferry_gbps"])
                rows.setdefault(f"transfer: {case['case']} speedup over .to()", {}).setdefault(side, []).append(case["speedup"])
        l = load(os.path.join(out, f"loaders-{side}-{r}", "loaders.json"))
        if l:
            for part, unit in (("images", "images/s"), ("tokens", "samples/s")):
                for p in l.get(part, {}).get("points", []):
                    rows.setdefault(f"loaders: {part}, {p['threads']} threads, ferry {unit}", {}).setdefault(side, []).append(p["ferry_samples_per_second"])
                    rows.setdefault(f"loaders: {part}, {p['threads']} threads, speedup over DataLoader", {}).setdefault(side, []).append(p["speedup"])
summary = []
print(f"{'median of ' + str(rounds) + ' alternating rounds':62} {'before':>12} {'after':>12} {'after/before':>13}")
for key, sides in rows.items():
    b, a = statistics.median(sides.get("before", [0])), statistics.median(sides.get("after", [0]))
    summary.append({"figure": key, "before": sides.get("before", []), "after": sides.get("after", []),
                    "median_before": b, "median_after": a})
    print(f"{key:62} {b:12.2f} {a:12.2f} {a / b if b else 0:13.3f}")
with open(os.path.join(out, "bench-ab.json"), "w") as f:
    json.dump(summary, f, indent=2)
PY
