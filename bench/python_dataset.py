#!/usr/bin/env python3
"""bench/python_dataset.py: the same map-style Dataset object through ferry (ferry.Pipeline.from_dataset,
worker processes) and through torch's DataLoader, in one run, on the same machine and device.

    PYTHONPATH=build/gpu/python python3 bench/python_dataset.py --out gpu-results/python-dataset \\
        [--workers 1,4,16] [--cases memory,small,jpeg,python] [--rounds 2] [--quick]

Cases (each sample a dict of numpy arrays; batch 64):
  memory  a 3x224x224 uint8 image and a label from arrays held in memory: the loaders' own cost
  small   1 KiB samples (float32[256] and a label): the cost per sample
  jpeg    a JPEG file decoded with PIL, resized to 224x224, flipped at random with numpy (mostly GIL-free)
  python  a pure-Python transform (a loop over the sample's bytes: holds the GIL), then a small array

ferry runs the dataset in worker processes (decode.workers) and, beside that, on its decode threads
(decode.workers: threads, decode.threads equal). DataLoader: num_workers equal to ferry's decode.workers, pin_memory on a GPU, persistent workers,
prefetch_factor 4, its default start method (fork on Linux), each batch moved with .to(device,
non_blocking=True). ferry: batches arrive on the device. Both loops take every batch and do nothing
else; the clock stops after a device synchronize. Reported per case and worker count, medians of the rounds
(loaders alternated): samples/s over the batches after the first, the time to the first batch (from
constructing the loader), CPU seconds per sample (this process and its children, user + system) and the peak
PSS of all those processes together, with what the loader added to this process's PSS before it was made
(torch and the device context are there for both) and its workers' alone. Writes OUT/python_dataset.json
and, with matplotlib, OUT/python_dataset.png (--plot JSON draws it again, beside that JSON, from an earlier
run's). Needs numpy and Pillow.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time

import numpy as np
import torch

import ferry
from bench_support import figure, png_beside, read_json, save  # bench/, beside this script
from python_dataset_cases import JpegFiles, MemoryImages, PythonWork, SmallSamples, make_jpegs

BATCH = 64


# ---- measuring processes ----

def descendants(pid):
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # it ended meanwhile
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as listed:
                    kids = [int(p) for p in listed.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def cpu_seconds(pids):
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, IndexError):
            pass
    return total


def pss_bytes(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


class PeakMemory:
    """The largest PSS of this process and its descendants together, sampled every 100 ms; the largest of
    the descendants (the loader's workers) alone; and this process's before the loader was made, so that
    what the loader added shows apart from what torch and the device context hold anyway."""

    def __init__(self):
        self.before = pss_bytes([os.getpid()])
        self.peak = 0
        self.peak_workers = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def sample(self):
        workers = pss_bytes(descendants(os.getpid()))
        self.peak_workers = max(self.peak_workers, workers)
        self.peak = max(self.peak, pss_bytes([os.getpid()]) + workers)

    def run(self):
        while not self.stop.wait(0.1):
            self.sample()

    def finish(self):
        """Call while the loader still runs: its last sample is taken here, so that a run shorter than the
        sampling interval is measured too (with no sample its peak would read 0)."""
        self.stop.set()
        self.thread.join()
        self.sample()
        return {"peak_pss_bytes": self.peak, "added_pss_bytes": max(0, self.peak - self.before),
                "workers_pss_bytes": self.peak_workers}


# ---- the two loaders ----

def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(make_batches, device, batches, keep_cpu=None):
    """Runs one loader: returns samples/s after the first batch, seconds to the first, CPU s/sample and
    peak PSS."""
    memory = PeakMemory()
    started = time.perf_counter()
    loader, close = make_batches()
    iterator = iter(loader)
    first = None
    taken = 0
    for batch in iterator:
        if keep_cpu is not None:
            batch = keep_cpu(batch)
        taken += 1
        if first is None:
            synchronize(device)
            first = time.perf_counter()
            cpu_first = cpu_seconds([os.getpid()] + descendants(os.getpid()))
        if taken == batches:
            break
    synchronize(device)
    ended = time.perf_counter()
    cpu_end = cpu_seconds([os.getpid()] + descendants(os.getpid()))
    memory_used = memory.finish()
    del iterator
    close()
    samples = (taken - 1) * BATCH
    return {"samples_per_second": samples / (ended - first), "first_batch_seconds": first - started,
            "cpu_seconds_per_sample": (cpu_end - cpu_first) / samples, **memory_used}


def run_ferry(dataset, workers, device, batches, threads=False):
    def make():
        decode = {"workers": "threads", "threads": workers} if threads else {"workers": workers}
        config = {"batch_size": BATCH, "sampler": {"epochs": 1000}, "decode": decode,
                  "transfer": {"device": str(device)}, "prefetch": 4}
        pipeline = ferry.Pipeline.from_dataset(dataset, config)
        return pipeline.batches(), pipeline.close
    return measure(make, device, batches)


def run_dataloader(dataset, workers, device, batches):
    def make():
        loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=workers,
                                             pin_memory=device.type == "cuda", persistent_workers=True,
                                             prefetch_factor=4)
        return loader, lambda: loader._iterator._shutdown_workers() if loader._iterator else None

    def to_device(batch):
        return {name: value.to(device, non_blocking=True) for name, value in batch.items()}
    return measure(make, device, batches, keep_cpu=to_device)


def plot(result, path):
    """OUT/python_dataset.png: samples/s per worker count of the three loaders, a panel a case."""
    results = result["results"]
    cases = list(dict.fromkeys(r["case"] for r in results))
    drawn, axes = figure(len(cases), f"your own Dataset through ferry and DataLoader, {result['device']}", width=4,
                         height=3.5)
    if drawn is None:
        return
    for axis, case in zip(axes, cases):
        rows = [r for r in results if r["case"] == case]
        x = np.arange(len(rows))
        axis.bar(x - 0.27, [r["ferry"]["samples_per_second"] for r in rows], 0.27, label="ferry (processes)")
        axis.bar(x, [r["ferry threads"]["samples_per_second"] for r in rows], 0.27, label="ferry (threads)")
        axis.bar(x + 0.27, [r["DataLoader"]["samples_per_second"] for r in rows], 0.27, label="DataLoader")
        axis.set_xticks(x, [f"{r['workers']} w" for r in rows])
        axis.set_title(rows[0]["title"], fontsize=8)
        axis.set_ylabel("samples/s")
    axes[0].legend()
    save(drawn, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="python-dataset-results")
    parser.add_argument("--workers", default="1,4,16")
    parser.add_argument("--cases", default="memory,small,jpeg,python")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a check that it runs, not a measurement")
    parser.add_argument("--plot", metavar="JSON",
                        help="only draw the plot of an earlier run's python_dataset.json, beside it")
    args = parser.parse_args()
    if args.plot:
        return plot(read_json(args.plot), png_beside(args.plot))
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    workers_list = [int(w) for w in args.workers.split(",")]
    scale = 0.05 if args.quick else 1.0
    jpeg_dir = os.path.join(tempfile.gettempdir(), "ferry-bench-jpegs")
    cases = {
        "memory": ("in-memory 3x224x224 uint8 + label", lambda: MemoryImages(10**7), 150),
        "small": ("1 KiB samples + label", lambda: SmallSamples(10**8), 1000),
        "jpeg": ("JPEG + PIL resize + numpy flip", lambda: JpegFiles(make_jpegs(jpeg_dir, 256), 10**7), 50),
        "python": ("pure-Python transform (GIL)", lambda: PythonWork(10**7), 50),
    }
    results = []
    print(f"# bench/python_dataset.py on {platform.node()}, {os.cpu_count()} cores, device {device}, "
          f"torch {torch.__version__}, ferry {ferry.__version__}{' (quick: not a measurement)' if args.quick else ''}")
    for case in args.cases.split(","):
        title, make_dataset, base_batches = cases[case]
        dataset = make_dataset()
        for workers in workers_list:
            batches = max(5, int(base_batches * scale * max(1, workers) ** 0.5))
            runs = {"ferry": [], "ferry threads": [], "DataLoader": []}
            for _ in range(args.rounds):
                runs["ferry"].append(run_ferry(dataset, workers, device, batches))
                runs["ferry threads"].append(run_ferry(dataset, workers, device, batches, threads=True))
                runs["DataLoader"].append(run_dataloader(dataset, workers, device, batches))
            row = {"case": case, "title": title, "workers": workers, "batches": batches}
            for loader, measured in runs.items():
                row[loader] = {key: statistics.median(m[key] for m in measured) for key in measured[0]}
            row["speedup"] = row["ferry"]["samples_per_second"] / row["DataLoader"]["samples_per_second"]
            row["memory_ratio"] = row["ferry"]["peak_pss_bytes"] / row["DataLoader"]["peak_pss_bytes"]
            row["added_memory_ratio"] = row["ferry"]["added_pss_bytes"] / max(1, row["DataLoader"]["added_pss_bytes"])
            row["threads_ratio"] = row["ferry threads"]["samples_per_second"] / row["ferry"]["samples_per_second"]
            results.append(row)
            f, d = row["ferry"], row["DataLoader"]
            print(f"{title:40s} w={workers:2d}  ferry {f['samples_per_second']:10.0f}/s  threads "
                  f"{row['ferry threads']['samples_per_second']:10.0f}/s  DataLoader "
                  f"{d['samples_per_second']:10.0f}/s  x{row['speedup']:.2f}  first {f['first_batch_seconds']:.2f}s/"
                  f"{d['first_batch_seconds']:.2f}s  cpu {f['cpu_seconds_per_sample'] * 1e6:.1f}/"
                  f"{d['cpu_seconds_per_sample'] * 1e6:.1f} us  pss {f['peak_pss_bytes'] / 2**20:.0f}/"
                  f"{d['peak_pss_bytes'] / 2**20:.0f} MiB (added {f['added_pss_bytes'] / 2**20:.0f}/"
                  f"{d['added_pss_bytes'] / 2**20:.0f}, workers {f['workers_pss_bytes'] / 2**20:.0f}/"
                  f"{d['workers_pss_bytes'] / 2**20:.0f})", flush=True)
    print("\n| case | workers | ferry samples/s | DataLoader samples/s | ferry / DataLoader | ferry threads samples/s "
          "(/ processes) | first batch ferry / DL (s) | CPU µs/sample ferry / DL | peak PSS ferry / DL (MiB) | "
          "added by the loader ferry / DL (MiB) | workers ferry / DL (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in results:
        f, d = row["ferry"], row["DataLoader"]
        print(f"| {row['title']} | {row['workers']} | {f['samples_per_second']:.0f} | {d['samples_per_second']:.0f} | "
              f"{row['speedup']:.2f}× | {row['ferry threads']['samples_per_second']:.0f} ({row['threads_ratio']:.2f}) | "
              f"{f['first_batch_seconds']:.2f} / {d['first_batch_seconds']:.2f} | "
              f"{f['cpu_seconds_per_sample'] * 1e6:.1f} / {d['cpu_seconds_per_sample'] * 1e6:.1f} | "
              f"{f['peak_pss_bytes'] / 2**20:.0f} / {d['peak_pss_bytes'] / 2**20:.0f} | "
              f"{f['added_pss_bytes'] / 2**20:.0f} / {d['added_pss_bytes'] / 2**20:.0f} | "
              f"{f['workers_pss_bytes'] / 2**20:.0f} / {d['workers_pss_bytes'] / 2**20:.0f} |")
    result = {"host": platform.node(), "cores": os.cpu_count(), "device": str(device), "torch": torch.__version__,
              "quick": args.quick, "results": results}
    with open(os.path.join(args.out, "python_dataset.json"), "w") as out:
        json.dump(result, out, indent=2)
    plot(result, os.path.join(args.out, "python_dataset.png"))


if __name__ == "__main__":
    main()
