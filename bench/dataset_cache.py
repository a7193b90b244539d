#!/usr/bin/env python3
"""bench/dataset_cache.py: the dataset cache (cache.memory) and the managed-memory helpers, with their
baselines measured in the same run.

    PYTHONPATH=build/gpu/python python3 bench/dataset_cache.py --ferry build/gpu/cli/ferry \\
        --data build/gpu/bench-data --out gpu-results/dataset-cache [--quick]

Needs the ferry Python package of a GPU build (torch with CUDA) and numpy. Three measurements:

prefetch  A managed tensor (ferry.uvm.create_unified_mempool) of N bytes prefetched to the host and
          back to the device (ferry.uvm.prefetch_managed_tensor, then a stream synchronize), in GB/s,
          beside a pinned host tensor copied to the device and back (copy_ with non_blocking, the
          same synchronize): the link's rate for the same bytes. Best of 5 for each.
epochs    Epochs 1.. (after the first, which fills the cache) of two workloads, in samples/s, as the
          Python loop sees them (each batch taken, then one torch.cuda.synchronize() per epoch):
            tokens  configs/megatron.yaml (windows of 2049 uint16 tokens, batches of 32, shuffled)
                    over `ferry make-dataset tokens`;
            npy     tar shards of float32 [64] .npy arrays with a .cls label (`ferry make-dataset npy`),
                    batches of 256, shuffled;
          each with cache.memory off (no cache), device, managed; and torch's DataLoader (as many
          workers as ferry has decode threads, pin_memory, .to(device, non_blocking=True)) reading
          the same files: numpy.memmap windows for tokens, the tar members with numpy.load for npy.
cache_to  For the managed cache of each workload: the time pipeline.cache_to(-1) and cache_to(0) take,
          and the cache's bytes; then an epoch gathered while the cache is on the host.

Prints the tables and writes OUT/dataset_cache.json and, with matplotlib, OUT/dataset_cache.png: per
workload, each loader's first and later epochs, and the managed prefetch beside the pinned copies. --plot
JSON draws it again, beside that JSON, from an earlier run's.
"""
import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time

import numpy as np
import torch
import torch.utils.data

import ferry
import ferry.uvm
from bench_support import (bars, figure, lines, made_before, png_beside, read_json, save,  # bench/, beside this script
                           stamp_made)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ_LEN = 2048
WINDOW = SEQ_LEN + 1


def log(message):
    print(f"dataset_cache: {message}", file=sys.stderr, flush=True)


def make(ferry_cli, kind, out, *flags):
    stamp = out + ".cache-bench.json"
    wanted = {"kind": kind, "flags": list(flags)}
    # A token dataset is OUT.bin and OUT.idx; the others a folder OUT.
    paths = [out + ".bin", out + ".idx"] if kind == "tokens" else [out]
    if made_before(stamp, wanted, paths, out, log):
        return
    log(f"making {kind} at {out}")
    subprocess.run([ferry_cli, "make-dataset", kind, out, *map(str, flags)], check=True, stdout=subprocess.DEVNULL)
    stamp_made(stamp, wanted)


# ------------------------------------------------------------------------------------------ prefetch

def best_seconds(action, stream, rounds=5):
    times = []
    for _ in range(rounds):
        stream.synchronize()
        start = time.perf_counter()
        action()
        stream.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_prefetch(sizes, device):
    rows = []
    supported, reason = ferry.uvm.is_supported()
    if not supported:
        return {"error": reason}
    pool = ferry.uvm.create_unified_mempool()
    stream = torch.cuda.current_stream(device)
    for size in sizes:
        with torch.cuda.use_mem_pool(pool):
            managed = torch.empty(size, dtype=torch.uint8, device=device)
        managed.fill_(1)
        to_host = best_seconds(lambda: (ferry.uvm.prefetch_managed_tensor(managed, device=-1),
                                        ferry.uvm.prefetch_managed_tensor(managed, device=device.index)), stream)
        # The two directions apart: host first, then time the way back alone, and the other way round.
        def there_and_time_back(target):
            ferry.uvm.prefetch_managed_tensor(managed, device=-1 if target >= 0 else device.index)
            stream.synchronize()
            start = time.perf_counter()
            ferry.uvm.prefetch_managed_tensor(managed, device=target)
            stream.synchronize()
            return time.perf_counter() - start
        to_device = min(there_and_time_back(device.index) for _ in range(5))
        to_cpu = min(there_and_time_back(-1) for _ in range(5))
        pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        on_device = torch.empty(size, dtype=torch.uint8, device=device)
        h2d = best_seconds(lambda: on_device.copy_(pinned, non_blocking=True), stream)
        d2h = best_seconds(lambda: pinned.copy_(on_device, non_blocking=True), stream)
        rows.append({"bytes": size, "prefetch_to_device_gbps": size / to_device / 1e9,
                     "prefetch_to_host_gbps": size / to_cpu / 1e9, "round_trip_seconds": to_host,
                     "pinned_h2d_gbps": size / h2d / 1e9, "pinned_d2h_gbps": size / d2h / 1e9})
        del managed, pinned, on_device
    del pool
    return {"rows": rows}


# -------------------------------------------------------------------------------------------- epochs

class TokenWindows(torch.utils.data.Dataset):
    """Window i: tokens [i * SEQ_LEN, i * SEQ_LEN + WINDOW) of the documents back to back, as ferry's
    TokenWindowSource reads them, carried as int16 (same bytes as uint16)."""

    def __init__(self, prefix):
        self.path = prefix + ".bin"
        self.length = (os.path.getsize(self.path) // 2 - 1) // SEQ_LEN
        self.tokens = None

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        if self.tokens is None:
            self.tokens = np.memmap(self.path, dtype=np.int16, mode="r")
        return torch.from_numpy(np.array(self.tokens[i * SEQ_LEN: i * SEQ_LEN + WINDOW]))


class TarNpy(torch.utils.data.Dataset):
    """Sample k of the shards: its .npy member through numpy.load, its .cls label."""

    def __init__(self, shards):
        self.members = []  # (shard, npy offset, npy size, label)
        for shard in shards:
            with tarfile.open(shard) as tar:
                pending = {}
                for member in tar:
                    key, ext = member.name.rsplit(".", 1)
                    pending.setdefault(key, {})[ext] = member
                for key, parts in pending.items():
                    label = int(tar.extractfile(parts["cls"]).read())
                    self.members.append((shard, parts["npy"].offset_data, parts["npy"].size, label))
        self.files = {}

    def __len__(self):
        return len(self.members)

    def __getitem__(self, i):
        shard, offset, size, label = self.members[i]
        f = self.files.get(shard)
        if f is None:
            f = self.files[shard] = open(shard, "rb")
        f.seek(offset)
        array = np.load(io.BytesIO(f.read(size)))
        return torch.from_numpy(array), torch.tensor(label, dtype=torch.int64)


def ferry_epochs(config, overrides, epochs, device, move=False):
    """samples/s of each epoch; with `move`, the managed cache goes to the host and back before the last
    epoch, timed, and that epoch is taken while it is on the host."""
    result = {"epochs": []}
    with ferry.Pipeline(config, overrides=overrides + [f"sampler.epochs={epochs}"]) as pipeline:
        for epoch in range(epochs):
            if move and epoch == epochs - 1:
                torch.cuda.synchronize(device)
                start = time.perf_counter()
                pipeline.cache_to(-1)
                result["cache_to_host_seconds"] = time.perf_counter() - start
            start = time.perf_counter()
            samples = 0
            for batch in pipeline:
                samples += next(iter(batch.values())).shape[0]
            torch.cuda.synchronize(device)
            result["epochs"].append(samples / (time.perf_counter() - start))
            if move and epoch == epochs - 1:
                start = time.perf_counter()
                pipeline.cache_to(device.index)
                result["cache_to_device_seconds"] = time.perf_counter() - start
        stats = pipeline.stats()
    cache = stats.get("cache")
    if cache:
        result["cache"] = cache
    later = result["epochs"][1:-1] if move else result["epochs"][1:]
    result["later_epochs_samples_per_second"] = statistics.median(later)
    return result


def dataloader_epochs(dataset, batch_size, workers, epochs, device):
    rates = []
    generator = torch.Generator().manual_seed(1234)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator,
                                         num_workers=workers, pin_memory=True, persistent_workers=workers > 0)
    for _ in range(epochs):
        start = time.perf_counter()
        samples = 0
        for batch in loader:
            parts = batch if isinstance(batch, (list, tuple)) else [batch]
            on_device = [p.to(device, non_blocking=True) for p in parts]
            samples += on_device[0].shape[0]
        torch.cuda.synchronize(device)
        rates.append(samples / (time.perf_counter() - start))
    return {"epochs": rates, "later_epochs_samples_per_second": statistics.median(rates[1:])}


def bench_workload(name, config, overrides, dataset, batch_size, threads, epochs, device):
    log(f"{name}: ferry without a cache")
    base = overrides + [f"decode.threads={threads}", f"transfer.device={device}"]
    rows = {"off": ferry_epochs(config, base + ["cache.memory=off"], epochs, device)}
    log(f"{name}: ferry, cache.memory=device")
    rows["device"] = ferry_epochs(config, base + ["cache.memory=device"], epochs, device)
    log(f"{name}: ferry, cache.memory=managed (and cache_to)")
    rows["managed"] = ferry_epochs(config, base + ["cache.memory=managed"], epochs + 1, device, move=True)
    log(f"{name}: DataLoader, {threads} workers")
    rows["dataloader"] = dataloader_epochs(dataset, batch_size, threads, epochs, device)
    return rows


LOADERS = (("ferry, no cache", "off"), ("ferry, cache device", "device"), ("ferry, cache managed", "managed"),
           ("DataLoader", "dataloader"))


def plot(result, path):
    """OUT/dataset_cache.png: per workload, epoch 0 and the later epochs of each loader; the prefetch's GB/s
    against its size beside the pinned copies'."""
    workloads = [name for name in ("tokens", "npy") if name in result]
    prefetch = result.get("prefetch", {}).get("rows", [])
    machine = result["machine"]
    drawn, axes = figure(len(workloads) + (1 if prefetch else 0), f"the dataset cache on {machine['gpu']}, "
                         f"{machine['cores']} cores, torch {machine['torch']}")
    if drawn is None:
        return
    for name, axis in zip(workloads, axes):
        rows = result[name]
        bars(axis, [label for label, _ in LOADERS],
             {"epoch 0 (fills the cache)": [rows[key]["epochs"][0] / 1e3 for _, key in LOADERS],
              "later epochs (median)": [rows[key]["later_epochs_samples_per_second"] / 1e3 for _, key in LOADERS]},
             "k samples/s", "{:.0f}")
        axis.set_title(f"{name}: samples/s as the Python loop sees them", fontsize=9)
    if prefetch:
        axis = axes[-1]
        sizes = [row["bytes"] for row in prefetch]
        series = {"managed prefetch to the device": "prefetch_to_device_gbps",
                  "managed prefetch to the host": "prefetch_to_host_gbps",
                  "pinned copy H2D": "pinned_h2d_gbps", "pinned copy D2H": "pinned_d2h_gbps"}
        lines(axis, {label: [(row["bytes"], row[key]) for row in prefetch] for label, key in series.items()},
              "bytes", "GB/s (best of 5)",
              styles={"pinned copy H2D": {"linestyle": "--"}, "pinned copy D2H": {"linestyle": "--"}})
        axis.set_xscale("log", base=2)
        axis.set_xticks(sizes, [f"{b >> 30} GiB" if b >= 1 << 30 else f"{b >> 20} MiB" for b in sizes])
        axis.minorticks_off()
        axis.set_title("managed memory's prefetch beside a pinned copy", fontsize=9)
    save(drawn, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ferry", help="the ferry command (for make-dataset)")
    parser.add_argument("--data", help="where the datasets are made and kept")
    parser.add_argument("--out")
    parser.add_argument("--threads", type=int, default=8, help="ferry's decode threads = DataLoader workers")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plot", metavar="JSON",
                        help="only draw the plot of an earlier run's dataset_cache.json, beside it")
    args = parser.parse_args()
    if args.plot:
        return plot(read_json(args.plot), png_beside(args.plot))
    if not (args.ferry and args.data and args.out):
        parser.error("--ferry, --data and --out are needed (or --plot JSON)")
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first fills the cache, the later ones are measured")
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.data, exist_ok=True)
    device = torch.device("cuda", 0)
    torch.cuda.init()

    tokens = os.path.join(args.data, "cache-tokens")
    make(args.ferry, "tokens", tokens, "--documents", 2000 if args.quick else 100000)
    npy = os.path.join(args.data, "cache-npy")
    shards = 4
    make(args.ferry, "npy", npy, "--samples", 20000 if args.quick else 400000, "--shards", shards)
    shard_paths = [os.path.join(npy, f"shard-{s:06d}.tar") for s in range(shards)]

    results = {"machine": {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__,
                           "ferry": ferry.__version__, "python": platform.python_version(), "cores": os.cpu_count()}}
    sizes = [16 << 20] if args.quick else [64 << 20, 256 << 20, 1 << 30, 4 << 30]
    log("prefetch")
    results["prefetch"] = bench_prefetch(sizes, device)

    npy_config = {
        "source": {"kind": "tar", "shards": f"{npy}/shard-{{000000..{shards - 1:06d}}}.tar",
                   "members": [{"name": "x", "extension": "npy", "decoder": "npy", "dtype": "float32", "shape": [64]},
                               {"name": "label", "extension": "cls", "decoder": "label", "dtype": "int64",
                                "shape": []}]},
        "batch_size": 256, "prefetch": 8, "sampler": {"shuffle": True, "seed": 1234},
    }
    results["tokens"] = bench_workload("tokens", os.path.join(REPO, "configs/megatron.yaml"),
                                       [f"source.prefix={tokens}"], TokenWindows(tokens), 32, args.threads,
                                       args.epochs, device)
    results["npy"] = bench_workload("npy", npy_config, [], TarNpy(shard_paths), 256, args.threads, args.epochs, device)

    with open(os.path.join(args.out, "dataset_cache.json"), "w") as f:
        json.dump(results, f, indent=2)
    plot(results, os.path.join(args.out, "dataset_cache.png"))

    machine = results["machine"]
    print(f"\n{machine['gpu']}, torch {machine['torch']}, ferry {machine['ferry']}, {machine['cores']} cores")
    prefetch = results["prefetch"]
    if "error" in prefetch:
        print(f"prefetch: {prefetch['error']}")
    else:
        print("\nmanaged prefetch vs pinned copy (GB/s, best of 5)")
        print(f"{'bytes':>12} {'prefetch->dev':>14} {'prefetch->host':>15} {'pinned H2D':>11} {'pinned D2H':>11}")
        for row in prefetch["rows"]:
            print(f"{row['bytes']:>12} {row['prefetch_to_device_gbps']:>14.1f} {row['prefetch_to_host_gbps']:>15.1f} "
                  f"{row['pinned_h2d_gbps']:>11.1f} {row['pinned_d2h_gbps']:>11.1f}")
    for name in ("tokens", "npy"):
        rows = results[name]
        print(f"\n{name}: samples/s, epochs after the first (median), {args.threads} threads/workers")
        print(f"{'loader':>24} {'epoch 0':>10} {'later':>10} {'x off':>6} {'gather us/batch':>16}")
        off = rows["off"]["later_epochs_samples_per_second"]
        for label, key in LOADERS:
            row = rows[key]
            gather = row.get("cache", {}).get("gather_seconds_per_batch")
            print(f"{label:>24} {row['epochs'][0]:>10.0f} {row['later_epochs_samples_per_second']:>10.0f} "
                  f"{row['later_epochs_samples_per_second'] / off:>6.2f} "
                  f"{'' if gather is None else f'{gather * 1e6:.1f}':>16}")
        managed = rows["managed"]
        cache = managed.get("cache", {})
        print(f"  managed cache {cache.get('used_bytes', 0) / 1e6:.1f} MB: cache_to(-1) "
              f"{managed['cache_to_host_seconds'] * 1e3:.1f} ms, cache_to(0) {managed['cache_to_device_seconds'] * 1e3:.1f} ms;"
              f" an epoch gathered from the host: {managed['epochs'][-1]:.0f} samples/s")


if __name__ == "__main__":
    main()
