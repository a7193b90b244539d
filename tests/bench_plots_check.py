#!/usr/bin/env python3
"""The benchmarks' plots, as CI checks them: the quick mode of each benchmark that is cheap on a small CPU
machine, shrunk further with its own flags, writes its JSON and a PNG beside it; bench/plot.py draws the
JSON of a tiny run of each C++ benchmark; --plot draws a Python benchmark's PNG again from its JSON alone.
Every JSON must parse, and every PNG must start with the PNG signature and be larger than empty axes.

    bench_plots_check.py --work DIR --ferry FERRY --images DIR --transfer T --latency L --jpeg-decode J \\
        --json-decode D

Run by the interpreter ferry's Python package was built for, with the package on PYTHONPATH. Measures
nothing: the runs are far too short for their figures to mean anything. Left out, each too slow for CI's
two cores or needing what CI lacks: bench/ddp_scaling.py (about 30 s of process launches), augment.py
(torchvision), dataset_cache.py (a CUDA GPU) and remote.py (nginx and a slow link). Exits 77 (CTest's
skip) where matplotlib is not installed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Empty axes of a benchmark's size make a PNG of about 9 kB; a plot of one point makes about 20 kB.
SMALLEST_PNG = 15_000


def run(command):
    start = time.monotonic()
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(map(str, command))} exited with {result.returncode}:\n"
                 f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
    print(f"{time.monotonic() - start:5.1f} s  {' '.join(map(str, command))}", flush=True)


def check(json_path):
    """The JSON parses and the PNG beside it is a PNG of some size."""
    with open(json_path) as f:
        json.load(f)
    png = os.path.splitext(json_path)[0] + ".png"
    if not os.path.exists(png):
        sys.exit(f"FAILED: no {png} beside {json_path}")
    with open(png, "rb") as f:
        data = f.read()
    if not data.startswith(PNG_SIGNATURE) or len(data) < SMALLEST_PNG:
        sys.exit(f"FAILED: {png} is not a plot ({len(data)} bytes, starting {data[:8]!r})")
    print(f"ok: {png} ({len(data)} bytes) beside {os.path.basename(json_path)}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True, help="a folder of this check's own (emptied first)")
    parser.add_argument("--ferry", required=True, help="the ferry command")
    parser.add_argument("--images", required=True, help="a folder of JPEGs (the dataset_images fixture)")
    parser.add_argument("--transfer", required=True)
    parser.add_argument("--latency", required=True)
    parser.add_argument("--jpeg-decode", required=True)
    parser.add_argument("--json-decode", required=True)
    args = parser.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed: the benchmarks draw no plots to check")
        return 77
    start = time.monotonic()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    out = lambda name: os.path.join(args.work, name)  # noqa: E731
    python = [sys.executable]

    # The C++ benchmarks: a tiny run each, then bench/plot.py on all four JSONs at once.
    cpp = [out("transfer.json"), out("latency.json"), out("jpeg_decode.json"), out("json_decode.json")]
    run([args.transfer, "--device", "cpu", "--quick", "--batches", 20, "--json", cpp[0]])
    run([args.latency, "--device", "cpu", "--batches", 500, "--json", cpp[1]])
    run([args.jpeg_decode, args.images, "--max-threads", 2, "--seconds", 0.05, "--repeats", 1, "--no-gpu",
         "--json", cpp[2]])
    run([args.json_decode, "--docs", 200, "--seconds", 0.05, "--out", cpp[3]])
    run(python + [os.path.join(BENCH, "plot.py")] + cpp)

    # The Python benchmarks' quick modes, narrowed to one or two points each.
    ferry = ["--ferry", args.ferry]
    runs = [
        ("python_iteration", ["--quick", "--rounds", 1], "python_iteration.json"),
        ("start_copy", ["--iterations", 5], "start_copy.json"),  # without a GPU: the boundary cost alone
        ("overlap", ferry + ["--data", out("data-overlap"), "--quick", "--cases", "tokens", "--steps-ms", "2,5"],
         "overlap.json"),
        ("loaders", ferry + ["--data", out("data-loaders"), "--device", "cpu", "--quick", "--threads", "1,2",
                             "--token-threads", 1, "--token-batches", 10, "--documents", 500], "loaders.json"),
        ("python_dataset", ["--quick", "--cases", "small", "--workers", 1, "--rounds", 1], "python_dataset.json"),
        ("language_data", ferry + ["--data", out("data-language"), "--quick", "--tables", "windows"],
         "language_data.json"),
        # --quick sets 256 images and 1, 2 workers over these flags; 64 images on one worker take half the time.
        ("detection", ["--data", out("data-detection"), "--device", "cpu", "--workers", 1, "--images", 64,
                       "--dataset-images", 64], "detection.json"),
    ]
    python_json = []
    for name, flags, written in runs:
        folder = out(name)
        run(python + [os.path.join(BENCH, f"{name}.py"), "--out", folder] + flags)
        python_json.append((name, os.path.join(folder, written)))

    for path in cpp:
        check(path)
    for name, path in python_json:
        check(path)
    # --plot draws the PNG again from the JSON alone (as from a run on another machine). It calls the plot()
    # the run called, so two of them (about 2.5 s each, most of it importing torch) check the flag and the
    # JSON's round trip.
    for name, path in python_json:
        if name in ("loaders", "overlap"):
            os.remove(os.path.splitext(path)[0] + ".png")
            run(python + [os.path.join(BENCH, f"{name}.py"), "--plot", path])
            check(path)
    print(f"bench plots: {len(cpp) + len(python_json)} benchmarks drew their plots in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
