#!/usr/bin/env python3
"""bench/python_iteration.py: ferry's pipeline iterated from Python beside the same pipeline iterated
in C++, on the same config, machine and device, in one process.

    PYTHONPATH=build/gpu/python python3 bench/python_iteration.py --out gpu-results/python-iteration \\
        [--rounds 7] [--quick]

For each config both consumers take every batch and do nothing with it, so what differs is the cost
of handing a batch over. Both rates come from the pipeline's own clock (wall time from its start to
the last batch taken), as ferry.Pipeline.stats() and `ferry run --report` give it:
  C++      the C++ iterator (`for (const Batch& b : pipeline)`) over a fresh ferry.Pipeline, run by
           its _drain_in_cpp() with the GIL released: no Python object per batch;
  Python   `for batch in pipeline.batches(): pass`: the binding's next(), a ferry.Batch (a dict of
           torch tensors) per batch, every batch of the run;
  epochs   `for epoch in range(pipeline.epochs): for batch in pipeline: pass`: the training-loop
           idiom, one loop per epoch (a generator frame more per batch).
Rounds alternate the three; the table shows the median of each and Python / C++ (goal: within 5%).
Writes OUT/python_iteration.json and, with matplotlib, OUT/python_iteration.png: the three rates per
config, and Python / C++. --plot JSON draws it again, beside that JSON, from an earlier run's.
"""
import argparse
import json
import os
import platform
import statistics
import sys

import torch

import ferry
from bench_support import bars, figure, png_beside, read_json, save  # bench/, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (name, config, overrides): small tensors (per-batch cost shows), the demo (mixed fields, padding).
CASES = [
    ("small tensors, 1000 x 4 KiB per batch", "configs/bench-small-tensors.yaml", []),
    ("demo: image, label, tokens; batch 64", "configs/demo.yaml", ["sampler.epochs=8"]),
    ("1 KiB samples, batch 32 (per-batch overhead)", "configs/bench-small-tensors.yaml",
     ["batch_size=32", "source.fields=[{name: features, dtype: float32, shape: [256]}]", "max_batches=20000"]),
    # The same with 16 batches in flight: with 4, a batch's trip through the stages (hand-offs between
    # threads, Note [per-batch cost]) bounds the rate at 4 / latency; bench/latency uses 16 too.
    ("1 KiB samples, batch 32, prefetch 16", "configs/bench-small-tensors.yaml",
     ["batch_size=32", "source.fields=[{name: features, dtype: float32, shape: [256]}]", "max_batches=40000",
      "prefetch=16"]),
]


def cpp_rate(config, overrides):
    with ferry.Pipeline(config, overrides=overrides) as pipeline:
        pipeline._impl._drain_in_cpp()
        return pipeline.stats()["totals"]


def python_rate(config, overrides):
    with ferry.Pipeline(config, overrides=overrides) as pipeline:
        for _ in pipeline.batches():
            pass
        return pipeline.stats()["totals"]


def python_epochs_rate(config, overrides):
    """The training-loop idiom: one `for batch in pipeline` loop per epoch."""
    with ferry.Pipeline(config, overrides=overrides) as pipeline:
        for _ in range(pipeline.epochs):
            if len(pipeline) == 0:  # max_batches ended the run
                break
            for _ in pipeline:
                pass
        return pipeline.stats()["totals"]


def plot(result, path):
    """OUT/python_iteration.png: batches/s of the three consumers per config, and each Python loop over C++."""
    drawn, (rates, ratios) = figure(2, f"iterating from Python and from C++ on {result['device']}, "
                                    f"{result['cores']} cores, median of {result['rounds']} rounds", width=7)
    if drawn is None:
        return
    rows = result["rows"]
    cases = [row["case"] for row in rows]
    bars(rates, cases, {"C++ iterator": [row["cpp_batches_per_second"] for row in rows],
                        "Python, pipeline.batches()": [row["python_batches_per_second"] for row in rows],
                        "Python, a loop per epoch": [row["python_epochs_batches_per_second"] for row in rows]},
         "batches/s", "{:.0f}")
    rates.set_yscale("log")  # the configs' rates differ by orders of magnitude
    rates.set_title("batches/s, each consumer doing nothing with a batch", fontsize=9)
    bars(ratios, cases, {"pipeline.batches() / C++": [row["python_over_cpp"] for row in rows],
                         "a loop per epoch / C++": [row["python_epochs_over_cpp"] for row in rows]},
         "Python's rate over C++'s", "{:.2f}")
    ratios.axhline(0.95, color="gray", linestyle="--", linewidth=1, label="goal: within 5%")
    ratios.legend(fontsize=7)
    ratios.set_title("Python over C++", fontsize=9)
    save(drawn, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="python-iteration")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="fewer batches, for a small CPU machine")
    parser.add_argument("--plot", metavar="JSON",
                        help="only draw the plot of an earlier run's python_iteration.json, beside it")
    args = parser.parse_args()
    if args.plot:
        return plot(read_json(args.plot), png_beside(args.plot))
    os.makedirs(args.out, exist_ok=True)

    rows = []
    python_rate(os.path.join(REPO, CASES[0][1]), ["max_batches=20"])  # warm-up: threads, allocator
    for name, config, overrides in CASES:
        config = os.path.join(REPO, config)
        overrides = list(overrides) + (["max_batches=50"] if args.quick else [])
        cpp, python, epochs = [], [], []
        for _ in range(args.rounds):
            cpp.append(cpp_rate(config, overrides))
            python.append(python_rate(config, overrides))
            epochs.append(python_epochs_rate(config, overrides))
        c = statistics.median(t["batches_per_second"] for t in cpp)
        p = statistics.median(t["batches_per_second"] for t in python)
        e = statistics.median(t["batches_per_second"] for t in epochs)
        assert cpp[0]["batches"] == python[0]["batches"] == epochs[0]["batches"], (cpp[0], python[0], epochs[0])
        rows.append({"case": name, "batches": cpp[0]["batches"], "cpp_batches_per_second": c,
                     "python_batches_per_second": p, "python_over_cpp": p / c,
                     "python_epochs_batches_per_second": e, "python_epochs_over_cpp": e / c,
                     "cpp_gigabytes_per_second": statistics.median(t["gigabytes_per_second"] for t in cpp),
                     "python_gigabytes_per_second": statistics.median(t["gigabytes_per_second"] for t in python)})

    device = ferry.Pipeline(os.path.join(REPO, CASES[0][1]), overrides={"max_batches": 1}).device
    print(f"ferry {ferry.__version__} ({ferry.build_kind}), torch {torch.__version__}, device {device}, "
          f"{os.cpu_count()} cores, median of {args.rounds} rounds")
    print(f"{'case':48} {'batches':>8} {'C++ batches/s':>14} {'Python batches/s':>17} {'Python/C++':>11} "
          f"{'epochs batches/s':>17} {'epochs/C++':>11}")
    for row in rows:
        print(f"{row['case']:48} {row['batches']:8d} {row['cpp_batches_per_second']:14.1f} "
              f"{row['python_batches_per_second']:17.1f} {row['python_over_cpp']:11.3f} "
              f"{row['python_epochs_batches_per_second']:17.1f} {row['python_epochs_over_cpp']:11.3f}")
    result = {"machine": platform.node(), "device": str(device), "torch": torch.__version__, "cores": os.cpu_count(),
              "rounds": args.rounds, "rows": rows}
    with open(os.path.join(args.out, "python_iteration.json"), "w") as f:
        json.dump(result, f, indent=2)
    plot(result, os.path.join(args.out, "python_iteration.png"))


if __name__ == "__main__":
    sys.exit(main())
