#!/usr/bin/env python3
"""bench/ddp_scaling.py: data-parallel loading on 1, 2 and 4 GPUs, one process per GPU as torchrun
starts them, ferry beside torch's DataLoader, and one ferry process feeding every GPU, in one
run.

    python3 bench/ddp_scaling.py --ferry build/gpu/cli/ferry --data build/gpu/bench-data \\
        --out gpu-results/ddp-scaling [--gpus 1,2,4] [--image-batches 320] [--token-batches 2000] [--quick]

Needs a Python with torch, numpy and pillow, and ferry's package on PYTHONPATH. For each N in --gpus
(those this machine has; with no GPU, or --quick, N in 1 and 2 on the CPU) the harness starts N rank
processes with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT). Each rank loads --batches batches onto cuda:LOCAL_RANK and trains nothing; the ranks do not
communicate, so what is measured is the loaders, as DDP would drive them, with the machine's cores
shared among the ranks:

  ferry       ferry.Pipeline, decode.threads auto (the cores / LOCAL_WORLD_SIZE), transfer.device auto
              (cuda:LOCAL_RANK); ferry shards by RANK and WORLD_SIZE itself;
  DataLoader  num_workers = cores / N, a DistributedSampler for the rank's share, pin_memory, each batch
              .to(cuda:LOCAL_RANK, non_blocking=True).

The third loader is not ranks: ferry-1proc is one process, started without torchrun's environment, that
feeds all N GPUs through one ferry.Pipeline with transfer.devices [cuda:0, ..., cuda:N-1] (a pipeline per
GPU, decoding on one shared pool; decode.threads auto, which is then all the cores but two). Each step
yields a list of N batches, batch i on cuda:i; it loads --batches steps, so as many samples as the N ranks
of the other two. With N = 1 it is one process with transfer.devices [cuda:0]; on the CPU, [cpu] x N.

Workloads, as bench/loaders.py has them: images (256 x 256 JPEGs, decoded to HWC uint8, batches of 256;
the DataLoader decodes with PIL) and tokens (configs/megatron.yaml's windows of 2049 tokens, batches of
32; the DataLoader reads the same .bin through numpy.memmap).

Rates: the ranks start together (each, once imported and with CUDA initialised, waits at a barrier
that the harness opens when all are there; ferry-1proc's one process waits at it the same way); each
notes when its last batch was on its devices (torch.cuda.synchronize() on each); the aggregate rate is
all processes' samples over the span from the barrier to the last end. The loaders are made after the
barrier, so their start-up counts. Scaling efficiency = rate(N) / (N x rate(1)) for the same loader.
CPU: user + system seconds of every process (rank or ferry-1proc) and its workers over the same span
(not the interpreter's start), per sample. Prints a table per workload and writes
OUT/ddp-scaling.json and, with matplotlib, OUT/ddp-scaling.png: per workload, each loader's aggregate rate
against the devices beside N x its rate on one (perfect scaling), and ferry's over the DataLoader's.
--plot JSON draws it again, beside that JSON, from an earlier run's. --quick: little data, a check that it
runs, not a measurement.
"""
import argparse
import importlib
import json
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import torch
import torch.utils.data

import loaders  # bench/, beside this script: the datasets and their makers
from bench_support import figure, lines, png_beside, ratio_lines, read_json, save, threads_axis

BATCHES = {"images": 256, "tokens": loaders.TOKEN_BATCH}
LOADERS = ("ferry", "ferry-1proc", "DataLoader")
# What torchrun sets; ferry-1proc's process must see none of it (ferry would take it for a rank).
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def log(message):
    print(f"ddp_scaling: {message}", file=sys.stderr, flush=True)


def cpu_seconds():
    """User + system seconds of this process and of its waited-for children (a DataLoader's workers, once
    its iterator is gone)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------- one rank
# A loader yields steps: a list of tensors, one per device the process feeds (one for a rank).

def ferry_config(args, batch):
    """The workload's config and overrides, less transfer (which a rank and ferry-1proc set differently)."""
    overrides = {"decode.threads": "auto", "max_batches": args.batches, "stats.progress": "off"}
    if args.workload == "images":
        config = {"source": {"kind": "image_folder", "root": args.root, "image": {"shape": [256, 256, 3]}},
                  "batch_size": batch, "prefetch": 4, "sampler": {"shuffle": False, "epochs": 1000}}
    else:
        config = os.path.join(loaders.REPO, "configs", "megatron.yaml")
        overrides.update({"source.prefix": args.root, "sampler.epochs": 1000, "batch_size": batch})
    return config, overrides


def ferry_loader(args, devices, batch):
    import ferry  # imported before the barrier (rank_main), so this is a lookup
    config, overrides = ferry_config(args, batch)
    overrides["transfer.device"] = "auto" if devices[0].type == "cuda" else "cpu"
    with ferry.Pipeline(config, overrides=overrides) as pipeline:
        for batch in pipeline.batches():  # across epochs, up to max_batches
            yield [batch["image" if args.workload == "images" else "tokens"]]


def ferry_group_loader(args, devices, batch):
    """ferry-1proc: one pipeline for every device; a step is a list of batches, batch i on devices[i]."""
    import ferry
    config, overrides = ferry_config(args, batch)
    # An override of transfer.devices wins over the file's transfer.device (configs/megatron.yaml sets it).
    # max_batches counts each device's batches, so steps.
    overrides["transfer.devices"] = "[" + ", ".join(str(device) for device in devices) + "]"
    with ferry.Pipeline(config, overrides=overrides) as pipeline:
        for step in pipeline.batches():
            yield [batch["image" if args.workload == "images" else "tokens"] for batch in step]


def dataloader_loader(args, devices, batch):
    device = devices[0]
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    wanted = args.batches * batch * world
    if args.workload == "images":
        files, labels = loaders.image_files(args.root)
        dataset = loaders.ImageFiles(files, labels, wanted)
    else:
        dtype, total = loaders.read_token_index(args.root)
        dataset = loaders.TokenWindows(args.root, dtype, total, wide=False)
    sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=world, rank=rank,
                                                  shuffle=args.workload == "tokens", seed=loaders.TOKEN_SEED)
    workers = max(1, len(os.sched_getaffinity(0)) // int(os.environ["LOCAL_WORLD_SIZE"]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch, sampler=sampler, num_workers=workers,
                                         pin_memory=device.type == "cuda", drop_last=True)
    for taken, data in enumerate(loader):
        if taken == args.batches:
            break
        yield [(data[0] if args.workload == "images" else data).to(device, non_blocking=True)]


def rank_main(args):
    """One process of the measurement: a rank (torchrun's environment, cuda:LOCAL_RANK), or ferry-1proc's
    one process (no such environment, cuda:0 .. cuda:N-1 for N = --feeds)."""
    cuda = torch.cuda.is_available()
    if args.loader == "ferry-1proc":
        rank = 0
        devices = [torch.device("cuda", d) if cuda else torch.device("cpu") for d in range(args.feeds)]
    else:
        rank = int(os.environ["RANK"])
        devices = [torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")]
    if cuda:
        torch.cuda.set_device(devices[0])
        for device in devices:
            torch.ones(1, device=device)  # CUDA initialised before the clock starts, for every loader and device
    batch = BATCHES[args.workload] if not args.quick else 32
    make = {"ferry": ferry_loader, "ferry-1proc": ferry_group_loader, "DataLoader": dataloader_loader}[args.loader]
    if args.loader.startswith("ferry"):
        importlib.import_module("ferry")  # before the clock: importing is not the loader's work
    # The barrier: say this process is ready, wait until the harness says go.
    open(os.path.join(args.barrier, f"ready-{rank}"), "w").close()
    go = os.path.join(args.barrier, "go")
    while not os.path.exists(go):
        time.sleep(0.001)
    cpu = cpu_seconds()
    start = time.time()
    first, samples = None, 0
    for step in make(args, devices, batch):
        samples += sum(tensor.shape[0] for tensor in step)
        if first is None:
            first = time.time()
    if cuda:
        for device in devices:  # the last step's copies, on every device fed
            torch.cuda.synchronize(device)
    end = time.time()
    print(json.dumps({"rank": rank, "start": start, "first": first, "end": end, "samples": samples,
                      "cpu_seconds": cpu_seconds() - cpu, "devices": [str(d) for d in devices]}), flush=True)


# ------------------------------------------------------------------------------------------- harness

def launch(args, loader, workload, root, world):
    """Starts one loader's processes for `world` devices (`world` ranks; ferry-1proc: one process, a world
    of one without torchrun's environment, feeding them all), opens their barrier once all are ready;
    returns their results."""
    port = str(free_port())
    barrier = tempfile.mkdtemp(prefix="ddp-scaling-")
    command = [sys.executable, os.path.abspath(__file__), "--rank-of", loader, "--workload", workload,
               "--root", root, "--batches", str(args.batches), "--barrier", barrier] + (["--quick"] if args.quick else [])
    one = loader == "ferry-1proc"
    if one:
        command += ["--feeds", str(world)]
    count = 1 if one else world
    processes = []
    for rank in range(count):
        # Not the harness's own torchrun variables, if it has any: ferry-1proc must look like a plain process.
        env = {name: value for name, value in os.environ.items() if name not in TORCHRUN_ENV}
        if not one:
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world),
                       LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
        if args.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        deadline = time.time() + args.timeout
        while sum(name.startswith("ready-") for name in os.listdir(barrier)) < count:
            if time.time() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(f"{loader}: not every one of {count} processes reached the barrier")
            time.sleep(0.01)
        open(os.path.join(barrier, "go"), "w").close()
        results = []
        for rank, process in enumerate(processes):
            out, err = process.communicate(timeout=max(1.0, deadline - time.time()))
            if process.returncode != 0:
                raise RuntimeError(f"{loader} process {rank} of {count} ({world} devices) exited with "
                                   f"{process.returncode}:\n{err[-3000:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for process in processes:  # a process that failed or hangs must not outlive the measurement
            if process.poll() is None:
                process.kill()
                process.wait()
        shutil.rmtree(barrier, ignore_errors=True)


def measure(args, loader, workload, root, world):
    processes = launch(args, loader, workload, root, world)
    cpu = sum(r["cpu_seconds"] for r in processes)
    samples = sum(r["samples"] for r in processes)
    span = max(r["end"] for r in processes) - min(r["start"] for r in processes)
    return {"workload": workload, "loader": loader, "gpus": world, "processes": len(processes), "samples": samples,
            "samples_per_second": samples / span, "seconds": span,
            "first_batch_seconds": max((r["first"] or r["end"]) - r["start"] for r in processes),
            "cpu_seconds_per_sample": cpu / samples, "devices": [d for r in processes for d in r["devices"]]}


def plot(result, path):
    """OUT/ddp-scaling.png: per workload, the aggregate rate against devices (perfect scaling dotted), and the
    ferry loaders' rates over the DataLoader's."""
    rows = result["rows"]
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    devices = f"{result['gpus']} GPUs" if result["device"] == "cuda" else "the CPU"
    drawn, axes = figure(2 * len(workloads), f"data-parallel loading on {devices}, {result['cores']} cores shared by "
                         "the processes", rows=len(workloads))
    if drawn is None:
        return
    for workload, rates, ratios in zip(workloads, axes[0::2], axes[1::2]):
        unit, scale = ("images/s", 1) if workload == "images" else ("M tokens/s", loaders.WINDOW / 1e6)
        mine = [r for r in rows if r["workload"] == workload]
        series, styles = {}, {}
        for i, loader in enumerate(result["loaders"]):
            points = [(r["gpus"], r["samples_per_second"] * scale) for r in mine if r["loader"] == loader]
            series[loader] = points
            styles[loader] = {"color": f"C{i}"}
            one = dict(points).get(1)
            if one:
                series[f"{loader}, perfect scaling"] = [(n, n * one) for n, _ in points]
                styles[f"{loader}, perfect scaling"] = {"color": f"C{i}", "linestyle": ":", "marker": "",
                                                        "alpha": 0.6}
        lines(rates, series, "devices", f"aggregate {unit}", styles)
        rates.set_title(f"{workload}: all processes together, start-up included", fontsize=9)
        dataloader = {r["gpus"]: r["samples_per_second"] for r in mine if r["loader"] == "DataLoader"}
        ratio_lines(ratios, {f"{loader} / DataLoader": [(r["gpus"], r["samples_per_second"] / dataloader[r["gpus"]])
                                                        for r in mine if r["loader"] == loader and r["gpus"] in dataloader]
                             for loader in result["loaders"] if loader != "DataLoader"},
                    "devices", "rate over the DataLoader's")
        ratios.set_title(f"{workload}: ferry over one DataLoader a rank", fontsize=9)
        for axis in (rates, ratios):
            threads_axis(axis, [r["gpus"] for r in mine])
    save(drawn, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ferry", help="the ferry command (a build's cli/ferry), to make the datasets")
    parser.add_argument("--data", help="where the datasets are (made when missing)")
    parser.add_argument("--out", default="ddp-scaling")
    parser.add_argument("--gpus", default="1,2,4")
    parser.add_argument("--batches", type=int, default=None,
                        help="batches each rank loads (ferry-1proc: steps, a batch for every device each); "
                             "default: --image-batches and --token-batches")
    # Long enough that start-up (the processes' pipelines, pools and workers) is not most of the span: 48
    # batches of either took 0.05 to 0.5 s and measured start-up, not loading (4 H200s).
    parser.add_argument("--image-batches", type=int, default=320)
    parser.add_argument("--token-batches", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=600, help="seconds a rank (or ferry-1proc) may take")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plot", metavar="JSON", help="only draw the plot of an earlier run's ddp-scaling.json, beside it")
    # A rank process, or ferry-1proc's one process (started by the harness):
    parser.add_argument("--rank-of", choices=LOADERS, help=argparse.SUPPRESS)
    parser.add_argument("--feeds", type=int, default=1, help=argparse.SUPPRESS)  # ferry-1proc's devices
    parser.add_argument("--workload", choices=["images", "tokens"], help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--barrier", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_of:
        args.loader = args.rank_of
        return rank_main(args)
    if args.plot:
        return plot(read_json(args.plot), png_beside(args.plot))
    if not args.ferry or not args.data:
        parser.error("--ferry and --data are needed (or --plot JSON)")

    gpus = torch.cuda.device_count()
    args.device = "cuda" if gpus > 0 and not args.quick else "cpu"
    # 1 always: the scaling efficiency is against it.
    worlds = [1, 2] if args.device == "cpu" else sorted({1} | {n for n in map(int, args.gpus.split(",")) if n <= gpus})
    batches = {"images": args.batches or args.image_batches, "tokens": args.batches or args.token_batches}
    if args.quick:
        batches = {workload: min(count, 8) for workload, count in batches.items()}
    os.makedirs(args.out, exist_ok=True)
    images = os.path.join(args.data, "images")
    loaders.make_images(args.ferry, images, 512 if args.quick else 8192)  # as bench/loaders.py makes it
    tokens = os.path.join(args.data, "tokens")
    loaders.make_tokens(args.ferry, tokens, 4000 if args.quick else 320000)

    rows = []
    for workload, root in (("images", images), ("tokens", tokens)):
        args.batches = batches[workload]  # what launch() passes to each process
        for loader in LOADERS:
            for world in worlds:
                log(f"{workload}, {loader}, {world} device(s)")
                row = measure(args, loader, workload, root, world)
                log(f"  {row['samples_per_second']:.0f} samples/s, {row['cpu_seconds_per_sample'] * 1e3:.3f} ms CPU a sample")
                rows.append(row)
    for row in rows:
        one = next(r for r in rows if r["workload"] == row["workload"] and r["loader"] == row["loader"] and r["gpus"] == 1)
        row["scaling_efficiency"] = row["samples_per_second"] / (row["gpus"] * one["samples_per_second"])

    cores = len(os.sched_getaffinity(0))
    print(f"torch {torch.__version__}, {args.device} ({gpus} GPUs), {cores} cores shared by the ranks, "
          f"{batches['images']} image and {batches['tokens']} token batches a rank (ferry-1proc: steps of a "
          "batch a device, one process)")
    for workload, unit, scale in (("images", "images/s", 1), ("tokens", "M tokens/s", loaders.WINDOW / 1e6)):
        print(f"\n{workload}: aggregate {unit} (scaling efficiency; CPU ms a sample)")
        print(f"{'loader':12}" + "".join(f"{f'{n} device(s)':>30}" for n in worlds))
        for loader in LOADERS:
            cells = []
            for n in worlds:
                r = next(r for r in rows if r["workload"] == workload and r["loader"] == loader and r["gpus"] == n)
                cells.append(f"{r['samples_per_second'] * scale:.{0 if scale == 1 else 2}f} "
                             f"({r['scaling_efficiency']:.2f}; {r['cpu_seconds_per_sample'] * 1e3:.3f})")
            print(f"{loader:12}" + "".join(f"{c:>30}" for c in cells))
    result = {"machine": platform.node(), "device": args.device, "gpus": gpus, "cores": cores,
              "torch": torch.__version__, "batches_per_rank": batches, "loaders": list(LOADERS), "rows": rows}
    with open(os.path.join(args.out, "ddp-scaling.json"), "w") as f:
        json.dump(result, f, indent=2)
    plot(result, os.path.join(args.out, "ddp-scaling.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
