#!/usr/bin/env python3
"""bench/start_copy.py: ferry.start_copy beside torch's own ways of moving many small tensors to the
GPU, and the per-tensor cost of crossing the Python boundary, in one run.

    PYTHONPATH=build/gpu/python python3 bench/start_copy.py --out gpu-results/start-copy [--iterations 50]

Structures (pageable CPU tensors, as a training step's inputs usually are):
  1000 x 4 KiB     float32 [1024] each
  1000 x 64 KiB    float32 [16384] each
  mixed 528        a dict of 16 entries, each a list of 32 small tensors (16..315 B, mixed dtypes) and one
                   of 4 KiB, plus strings and None: ~150 KB in 528 tensors
  4 x 16 MiB       float32 [4194304] each: a few large tensors, where the link sets the time
Methods, each timed from the call to the data being on the GPU (torch.cuda.synchronize()), median
of --iterations after 10 warm-up rounds:
  .to() per tensor   tensor.to("cuda", non_blocking=True) for every tensor (the usual loop)
  cat + one copy     torch.cat of every tensor's bytes into a pinned buffer, then one
                     .to("cuda", non_blocking=True) of it (no views rebuilt: the lower bound of packing)
  ferry.start_copy   start_copy(structure, "cuda").get() with the default options (packing into pinned
                     chunks on ferry's copy thread, one cudaMemcpyAsync per chunk), the structure rebuilt
Per-tensor Python boundary (CPU only, 10 000 tensors of 16 floats, per tensor):
  ferry              start_copy(list, "cpu", use_background_thread=False).get(): every tensor read with
                     torch's own binding (THPVariable) and handed back (reused, no copy)
  DLPack             torch.utils.dlpack.from_dlpack(to_dlpack(t))
  array interface    torch.from_numpy(t.numpy())
Prints the tables and writes OUT/start_copy.json and, with matplotlib, OUT/start_copy.png: each method's time
per structure and start_copy's speed-up over the two torch ways (with a GPU), and the per-tensor boundary
cost. --plot JSON draws it again, beside that JSON, from an earlier run's.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.utils.dlpack

import ferry
from bench_support import bars, figure, png_beside, read_json, save  # bench/, beside this script


def structures():
    generator = torch.Generator().manual_seed(0)
    small = [torch.randn(1024, generator=generator) for _ in range(1000)]
    large = [torch.randn(16384, generator=generator) for _ in range(1000)]
    dtypes = [torch.float32, torch.int64, torch.int32, torch.float16, torch.uint8]
    mixed = {}
    for entry in range(16):
        items = []
        for i in range(32):
            dtype = dtypes[(entry + i) % len(dtypes)]
            size = 16 + (entry * 32 + i) * 37 % 300  # bytes
            elements = max(1, size // torch.tensor([], dtype=dtype).element_size())
            items.append(torch.randint(0, 100, (elements,), generator=generator).to(dtype))
        items.append(torch.randn(1024, generator=generator))
        mixed[f"entry{entry}"] = {"tensors": items, "name": f"sample {entry}", "extra": None}
    huge = [torch.randn(4 << 20, generator=generator) for _ in range(4)]
    return [("1000 x 4 KiB", small), ("1000 x 64 KiB", large), ("mixed 528", mixed), ("4 x 16 MiB", huge)]


def leaves(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)


def to_each(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, list):
        return [to_each(v, device) for v in value]
    if isinstance(value, dict):
        return {k: to_each(v, device) for k, v in value.items()}
    return value


def timed(function, iterations, synchronize):
    for _ in range(10):
        function()
        synchronize()
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        function()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ferry_phases(data, device, iterations):
    """Medians of start_copy()'s return, get(), the final sync, and dropping the handle and the
    results (which the timed methods above pay inside their time), each timed alone (ms)."""
    phases = {"start_copy()": [], "get()": [], "sync": [], "drop handle": [], "drop result": []}
    for round in range(10 + iterations):
        start = time.perf_counter()
        handle = ferry.start_copy(data, device)
        started = time.perf_counter()
        result = handle.get()
        got = time.perf_counter()
        torch.cuda.synchronize()
        synced = time.perf_counter()
        del handle
        handle_dropped = time.perf_counter()
        del result
        result_dropped = time.perf_counter()
        if round >= 10:
            phases["start_copy()"].append(started - start)
            phases["get()"].append(got - started)
            phases["sync"].append(synced - got)
            phases["drop handle"].append(handle_dropped - synced)
            phases["drop result"].append(result_dropped - handle_dropped)
    return {phase: 1e3 * statistics.median(times) for phase, times in phases.items()}


def bench_gpu(iterations):
    device = "cuda:0"
    rows = []
    for name, data in structures():
        tensors = list(leaves(data))
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        pinned = torch.empty(nbytes, dtype=torch.uint8).pin_memory()

        def cat_one_copy():
            torch.cat([t.reshape(-1).view(torch.uint8) for t in tensors], out=pinned)
            return pinned.to(device, non_blocking=True)

        sizes = [t.numel() * t.element_size() for t in tensors]
        on_device = torch.empty(nbytes, dtype=torch.uint8, device=device)
        methods = {
            ".to() per tensor": lambda: to_each(data, device),
            "cat + one copy": cat_one_copy,
            "ferry.start_copy": lambda: ferry.start_copy(data, device).get(),
            # Not a copy: what handing this many new tensors to Python (and freeing them) costs at least.
            "views alone": lambda: on_device.split(sizes),
        }
        seconds = {method: timed(function, iterations, torch.cuda.synchronize) for method, function in methods.items()}
        rows.append({"structure": name, "tensors": len(tensors), "bytes": nbytes,
                     "milliseconds": {m: s * 1e3 for m, s in seconds.items()},
                     "ferry_phases_ms": ferry_phases(data, device, iterations),
                     "speedup_vs_to": seconds[".to() per tensor"] / seconds["ferry.start_copy"],
                     "speedup_vs_cat": seconds["cat + one copy"] / seconds["ferry.start_copy"]})
    return rows


def bench_boundary():
    tensors = [torch.randn(16) for _ in range(10000)]
    methods = {
        "ferry (THPVariable)": lambda: ferry.start_copy(tensors, "cpu", use_background_thread=False).get(),
        "DLPack": lambda: [torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t)) for t in tensors],
        "array interface": lambda: [torch.from_numpy(t.numpy()) for t in tensors],
    }
    return {m: timed(f, 20, lambda: None) / len(tensors) * 1e6 for m, f in methods.items()}


def plot(result, path):
    """OUT/start_copy.png: with a GPU, ms per structure and method and start_copy's speed-ups; the boundary cost."""
    copies = result.get("copies", [])
    drawn, axes = figure(3 if copies else 1, f"nested tensors to {result['gpu'] or 'no GPU'}, torch {result['torch']}")
    if drawn is None:
        return
    if copies:
        structures = [f"{row['structure']}\n{row['bytes'] / 1024:.0f} KiB" for row in copies]
        methods = list(copies[0]["milliseconds"])
        bars(axes[0], structures, {m: [row["milliseconds"][m] for row in copies] for m in methods},
             "ms to the GPU (median)", "{:.2f}")
        axes[0].set_title("time from the call to the data on the GPU", fontsize=9)
        bars(axes[1], structures, {"ferry.start_copy vs .to() per tensor": [row["speedup_vs_to"] for row in copies],
                                   "ferry.start_copy vs cat + one copy": [row["speedup_vs_cat"] for row in copies]},
             "speed-up (times faster)", "{:.1f}x")
        axes[1].axhline(1.0, color="gray", linestyle=":", linewidth=1)
        axes[1].set_title("ferry.start_copy's speed-up over torch's ways", fontsize=9)
    boundary = result["boundary_us_per_tensor"]
    bars(axes[-1], list(boundary), {"per tensor": list(boundary.values())}, "µs a tensor", "{:.2f}")
    axes[-1].set_title("reading a tensor at the Python boundary (10 000 CPU tensors)", fontsize=9)
    save(drawn, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="start-copy")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--plot", metavar="JSON", help="only draw the plot of an earlier run's start_copy.json, beside it")
    args = parser.parse_args()
    if args.plot:
        return plot(read_json(args.plot), png_beside(args.plot))
    os.makedirs(args.out, exist_ok=True)
    gpu = torch.cuda.is_available() and ferry.build_kind == "GPU"
    print(f"ferry {ferry.__version__} ({ferry.build_kind}), torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0) if gpu else 'no GPU'}, {os.cpu_count()} cores")
    result = {"machine": platform.node(), "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if gpu else None}
    if gpu:
        rows = bench_gpu(args.iterations)
        result["copies"] = rows
        methods = list(rows[0]["milliseconds"])
        print(f"\nms to the GPU (median of {args.iterations}) " + "".join(f"{m:>19}" for m in methods)
              + f"{'vs .to()':>10}{'vs cat':>8}")
        for row in rows:
            print(f"{row['structure']:14} {row['tensors']:5d} t {row['bytes'] / 1024:7.0f} KiB"
                  + "".join(f"{row['milliseconds'][m]:19.3f}" for m in methods)
                  + f"{row['speedup_vs_to']:9.2f}x{row['speedup_vs_cat']:7.2f}x")
        print("ferry.start_copy by phase (ms, medians, each timed alone): "
              + "; ".join(f"{row['structure']}: " + ", ".join(f"{p} {ms:.3f}" for p, ms in row["ferry_phases_ms"].items())
                          for row in rows))
    else:
        print("(no GPU: only the per-tensor boundary cost)")
    boundary = bench_boundary()
    result["boundary_us_per_tensor"] = boundary
    print("\nper tensor at the Python boundary (10 000 CPU tensors): "
          + ", ".join(f"{m} {us:.2f} us" for m, us in boundary.items()))
    with open(os.path.join(args.out, "start_copy.json"), "w") as f:
        json.dump(result, f, indent=2)
    plot(result, os.path.join(args.out, "start_copy.png"))


if __name__ == "__main__":
    sys.exit(main())
