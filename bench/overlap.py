#!/usr/bin/env python3
"""bench/overlap.py: how much of a training loop waits for ferry, with a simulated GPU step.

    PYTHONPATH=build/gpu/python python3 bench/overlap.py --ferry build/gpu/cli/ferry --data /tmp/ferry-data \\
        --out gpu-results/overlap [--steps-ms 1,5,20] [--cases tokens,images,jpeg] [--quick]

The loop: take a batch (next()), then a simulated step of S ms on the GPU (a sleep kernel on the
current stream, torch.cuda._sleep, then one synchronization, as loss.item() does); on a CPU device the
step is a host sleep. Reported: the share of the loop spent waiting in next(), and the wait per step,
from the first batch on (the first batch's wait, the pipeline starting, is in the JSON apart), and
the C++ loop's waits at the median, 99th percentile and largest, with the steps that waited over 1 ms
(a few long stalls and a small cost on every step need different fixes). Both loops drop their
reference to the last step's batch just before next() and time that apart ("drop": the batch is
freed there, since ferry's Python iterator keeps no reference to a batch it handed over).
The loop runs in Python (`for batch in pipeline`) and in C++ (the same loop inside the extension,
Pipeline._train_in_cpp, GIL released) on the same config.

Cases (decode.threads 16, or every core when fewer):
  tokens   configs/bench-tokens.yaml: 32 x 2049 int32 tokens (262 KB a batch)
  images   configs/bench-images.yaml: 256 x 3 x 224 x 224 uint8 synthetic (38.5 MB a batch)
  jpeg     configs/image-folder.yaml on ferry make-dataset images (256 x 256 q90 JPEGs): batch 64,
           resized and cropped to 224 x 224
A wait share under 1% is the goal where the loader delivers faster than the step rate; the table
gives the loader's own rate (batches/s with nothing else running, from a run without steps) beside
the step rate so that the two cases can be told apart. Writes OUT/overlap.json and, with matplotlib,
OUT/overlap.png: the share of the loop waiting in next() against the step (C++ and Python loops), the
C++ loop's median and 99th-percentile wait a step, and each loader's own rate beside the step rate.
--plot JSON draws it again, beside that JSON, from an earlier run's.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

import ferry
from bench_support import figure, lines, make_image_folder, png_beside, read_json, save  # bench/, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(message):
    print(f"overlap: {message}", file=sys.stderr, flush=True)


def cycles_per_second():
    """GPU clock cycles per second of torch.cuda._sleep, measured (the clock differs by GPU and load)."""
    torch.cuda.synchronize()
    rates = []
    for _ in range(5):
        cycles = 20_000_000
        start = time.perf_counter()
        torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
        rates.append(cycles / (time.perf_counter() - start))
    return statistics.median(rates)


def python_loop(pipeline, steps, step_seconds, cycles):
    """As Pipeline._train_in_cpp: the loop is timed from the first batch on, whose wait (the pipeline
    starting) is reported apart."""
    iterator = iter(pipeline.batches())
    waited = first_wait = 0.0
    waits = []
    done = 0
    start = time.perf_counter()
    dropped = 0.0
    batch = None
    while done < steps:
        # The last step's batch is let go apart from next(), as in the C++ loop: it is its last reference
        # (Pipeline.batches() keeps none), so the batch is freed here.
        dropping = time.perf_counter()
        batch = None
        asked = time.perf_counter()
        batch = next(iterator, None)
        wait = time.perf_counter() - asked
        if batch is None:
            break
        if done == 0:
            first_wait = wait
            start = time.perf_counter()
        else:
            waited += wait
            waits.append(wait)
            dropped += asked - dropping
        done += 1
        if cycles:
            torch.cuda._sleep(cycles)
            torch.cuda.current_stream().synchronize()
        else:
            time.sleep(step_seconds)
    return {"steps": done, "loop_seconds": time.perf_counter() - start, "wait_seconds": waited,
            "first_wait_seconds": first_wait, "waits": waits, "drop_seconds": dropped}


def percentile(values, share):
    """The value below which `share` of `values` fall (nearest rank); 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def loader_rate(config, overrides):
    with ferry.Pipeline(config, overrides=overrides) as pipeline:
        pipeline._impl._drain_in_cpp()
        return pipeline.stats()["totals"]["batches_per_second"]


def plot(result, path):
    """OUT/overlap.png: per case (a colour), the wait against the step, and the loader's rate beside the step's."""
    drawn, (share, per_step, rates) = figure(3, f"a training loop's wait in next() on {result['device']}, "
                                             f"{result['cores']} cores, {result['decode_threads']} decode threads")
    if drawn is None:
        return
    rows = result["rows"]
    waits, percentiles, loader_rates, styles = {}, {}, {}, {}
    for i, case in enumerate(dict.fromkeys(r["case"] for r in rows)):
        mine = [r for r in rows if r["case"] == case]
        short = case.split()[0]  # the full name is in the third panel's legend
        for driver, name, line in (("cpp", "C++", "-"), ("python", "Python", "--")):
            label = f"{short}, {name} loop"
            waits[label] = [(r["step_ms"], 100 * r[f"{driver}_wait_share"]) for r in mine
                            if f"{driver}_wait_share" in r]
            styles[label] = {"color": f"C{i}", "linestyle": line}
        for key, name, line in (("cpp_wait_p50_ms", "median", "-"), ("cpp_wait_p99_ms", "99th percentile", "--")):
            label = f"{short}, {name}"
            percentiles[label] = [(r["step_ms"], r[key]) for r in mine if key in r]
            styles[label] = {"color": f"C{i}", "linestyle": line}
        loader_rates[f"{case}, the loader alone"] = [(r["step_ms"], r["loader_batches_per_second"]) for r in mine]
        styles[f"{case}, the loader alone"] = {"color": f"C{i}"}
    steps = sorted({r["step_ms"] for r in rows})
    loader_rates["the step rate"] = [(ms, 1000.0 / ms) for ms in steps]
    styles["the step rate"] = {"color": "black", "linestyle": ":"}
    share.axhline(1.0, color="gray", linestyle=":", linewidth=1)  # the goal where the loader is faster
    lines(share, waits, "simulated step (ms)", "% of the loop waiting in next()", styles)
    share.set_title("the loop's wait (goal: under 1% where the loader is faster)", fontsize=9)
    lines(per_step, percentiles, "simulated step (ms)", "wait in next() a step, C++ loop (ms)", styles)
    per_step.set_title("a cost on every step (median) or a few stalls (99th)", fontsize=9)
    lines(rates, loader_rates, "simulated step (ms)", "batches/s", styles, log_y=True)
    rates.set_title("the loader's own rate beside the step rate", fontsize=9)
    for axis in (share, per_step, rates):
        axis.set_xscale("log")
        axis.set_xticks(steps, [f"{ms:g}" for ms in steps])
        axis.minorticks_off()
    save(drawn, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ferry", help="the ferry binary (for make-dataset)")
    parser.add_argument("--data", help="folder for the JPEG dataset (made when missing)")
    parser.add_argument("--out")
    parser.add_argument("--steps-ms", default="1,5,20")
    parser.add_argument("--cases", default="tokens,images,jpeg", help="which cases, comma-separated")
    parser.add_argument("--loop-seconds", type=float, default=3.0, help="about how long each loop runs")
    parser.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1))
    parser.add_argument("--quick", action="store_true", help="short loops, few images: a check, not a measurement")
    parser.add_argument("--plot", metavar="JSON", help="only draw the plot of an earlier run's overlap.json, beside it")
    args = parser.parse_args()
    if args.plot:
        return plot(read_json(args.plot), png_beside(args.plot))
    if not (args.ferry and args.data and args.out):
        parser.error("--ferry, --data and --out are needed (or --plot JSON)")
    os.makedirs(args.out, exist_ok=True)
    if args.quick:
        args.loop_seconds = 0.3
    images = os.path.join(args.data, "overlap-images")
    if "jpeg" in args.cases.split(","):
        make_image_folder(args.ferry, images, 512 if args.quick else 8192, "256", ".overlap-bench.json", log)

    common = [f"decode.threads={args.threads}", "sampler.epochs=1000"]
    cases = [
        ("tokens 32 x 2049 int32", os.path.join(REPO, "configs/bench-tokens.yaml"), common),
        ("images 256 x 3 x 224 x 224", os.path.join(REPO, "configs/bench-images.yaml"), common),
        ("jpeg 64 x 224 x 224 x 3", os.path.join(REPO, "configs/image-folder.yaml"),
         common + [f"source.root={images}", "decode.on_error=fail"]),
    ]
    wanted = set(args.cases.split(","))
    unknown = wanted - {"tokens", "images", "jpeg"}
    if unknown:
        parser.error(f"--cases: unknown {', '.join(sorted(unknown))} (tokens, images, jpeg)")
    cases = [case for case in cases if case[0].split()[0] in wanted]
    device = str(ferry.Pipeline(cases[0][1], overrides={"max_batches": 1}).device)
    gpu = device.startswith("cuda")
    per_second = cycles_per_second() if gpu else 0.0
    rows = []
    for name, config, overrides in cases:
        rate = loader_rate(config, overrides + [f"max_batches={int(200 if args.quick else 2000)}"])
        for step_ms in [float(s) for s in args.steps_ms.split(",")]:
            step = step_ms / 1000.0
            steps = max(20, int(args.loop_seconds / step))
            cycles = int(per_second * step) if gpu else 0
            result = {}
            for driver in ("cpp", "python"):
                with ferry.Pipeline(config, overrides=overrides + [f"max_batches={steps}"]) as pipeline:
                    if driver == "cpp" and not hasattr(pipeline._impl, "_train_in_cpp"):
                        continue  # a ferry older than this benchmark: the Python loop alone
                    if driver == "cpp":
                        result[driver] = dict(pipeline._impl._train_in_cpp(steps, step, cycles))
                    else:
                        result[driver] = python_loop(pipeline, steps, step, cycles)
            row = {"case": name, "step_ms": step_ms, "steps": steps, "loader_batches_per_second": rate,
                   "step_rate": 1.0 / step}
            for driver, r in result.items():
                row[f"{driver}_wait_share"] = r["wait_seconds"] / r["loop_seconds"]
                row[f"{driver}_wait_ms_per_step"] = 1e3 * r["wait_seconds"] / max(1, r["steps"])
                row[f"{driver}_steps"] = r["steps"]
                row[f"{driver}_drop_ms_per_step"] = 1e3 * r.get("drop_seconds", 0.0) / max(1, r["steps"])
                row[f"{driver}_first_wait_ms"] = 1e3 * r["first_wait_seconds"]
                # Whether the wait is a few long stalls or a cost on every step.
                waits = list(r.get("waits", []))
                row[f"{driver}_wait_p50_ms"] = 1e3 * percentile(waits, 0.50)
                row[f"{driver}_wait_p99_ms"] = 1e3 * percentile(waits, 0.99)
                row[f"{driver}_wait_max_ms"] = 1e3 * max(waits, default=0.0)
                row[f"{driver}_steps_waiting_over_1ms"] = sum(1 for w in waits if w > 1e-3)
            rows.append(row)
            log(f"{name}, step {step_ms} ms: waited {100 * row.get('cpp_wait_share', float('nan')):.2f}% (C++), "
                f"{100 * row['python_wait_share']:.2f}% (Python)")

    print(f"ferry {ferry.__version__} ({ferry.build_kind}), torch {torch.__version__}, device {device}, "
          f"{os.cpu_count()} cores, decode threads {args.threads}")
    print(f"{'case':28} {'step ms':>7} {'loader b/s':>11} {'step b/s':>9} {'C++ wait %':>11} {'C++ ms/step':>12} "
          f"{'Py wait %':>10} {'Py ms/step':>11} {'C++ p50/p99/max ms':>20} {'> 1 ms':>7} {'drop ms C++/Py':>15}")
    for r in rows:
        print(f"{r['case']:28} {r['step_ms']:7.0f} {r['loader_batches_per_second']:11.0f} {r['step_rate']:9.0f} "
              f"{100 * r.get('cpp_wait_share', float('nan')):11.2f} {r.get('cpp_wait_ms_per_step', float('nan')):12.3f} "
              f"{100 * r['python_wait_share']:10.2f} {r['python_wait_ms_per_step']:11.3f} "
              f"{r.get('cpp_wait_p50_ms', 0):6.3f}/{r.get('cpp_wait_p99_ms', 0):6.3f}/{r.get('cpp_wait_max_ms', 0):6.2f} "
              f"{r.get('cpp_steps_waiting_over_1ms', 0):7d} "
              f"{r.get('cpp_drop_ms_per_step', 0):7.3f}/{r['python_drop_ms_per_step']:.3f}")
    result = {"machine": platform.node(), "device": device, "torch": torch.__version__, "cores": os.cpu_count(),
              "decode_threads": args.threads, "rows": rows}
    with open(os.path.join(args.out, "overlap.json"), "w") as f:
        json.dump(result, f, indent=2)
    plot(result, os.path.join(args.out, "overlap.png"))


if __name__ == "__main__":
    sys.exit(main())
