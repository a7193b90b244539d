#!/usr/bin/env python3
"""bench/augment.py: training-ready image batches, ferry beside torch's DataLoader and
torchvision's GPU decoder, on the same files, cores and device, in one run.

    python3 bench/augment.py --ferry build/gpu/cli/ferry --data build/gpu/bench-data --device cuda \\
        --out gpu-results/augment [--threads 1,4,16] [--images 8192] [--quick]

Needs a Python with torch, torchvision and numpy. The recipe is configs/imagenet-train.yaml's: a
random-resized crop of the whole image to 224 x 224 (scale 0.08..1, ratio 3/4..4/3), a horizontal
flip with probability 0.5, values scaled to [0, 1] and normalized with ImageNet's mean and std,
delivered on the device as bfloat16 NCHW batches of 256 with their labels. Two datasets, made with `ferry make-dataset images` when --data lacks them:
256 x 256 JPEGs and ImageNet-like ones (`--image-size imagenet`: mostly 500 x 375), q90.

For each T in --threads (not above the cores this process may use):
  ferry cpu     `ferry run configs/imagenet-train.yaml`, decode.threads T: libjpeg-turbo on T threads,
                the augmentation one kernel per batch on the GPU after the copy;
  ferry gpu     the same with the jpeg decoder's device: gpu (nvJPEG's hardware decoder), when this
  ferry auto    build has it, and device: auto (the faster of the two, measured as the run starts);
  DataLoader    num_workers T, each sample read and decoded by torchvision.io.decode_jpeg, resized,
                cropped, flipped, converted and normalized by torchvision.transforms.v2 in the worker
                (float32), default collate, pin_memory, .to(device, non_blocking=True), then bfloat16 on
                the device;
  DataLoader, normalize on GPU: the same but the workers stop at the uint8 crop and flip; the batch is
                converted and normalized on the device (less host work and a quarter of the bytes);
  torchvision GPU  T threads read the files; torchvision.io.decode_jpeg(device="cuda") decodes each
                batch of 256 on the GPU, then the same v2 transforms run on the GPU per image, stacked,
                converted and normalized.

Rates: images / wall time. ferry's from its report (pipeline start to the last batch ready on the
device); the others from the loader's start (iter()) to torch.cuda.synchronize() after the last batch.
A second table gives each loader's rate after its first batch (the images after it over the time after
it) and when that batch came: the steady rate apart from the start-up (worker processes, nvJPEG's
set-up, which took about a second on an H200 and dominated runs of 8192 images). ferry's first batch
is timed when the consumer has it (ready on its stream), the others' after a device synchronize.
CPU: user + system seconds of every process of the loader (ferry's own process; the DataLoader's
workers and this process) per image, from getrusage. Then ferry alone, at the largest T, over
--long-images (default 131072): its steady rate and the share of images the GPU decoded, since under
`auto` the GPU decoder starts in the background and joins after a run of 8192 images is over. Prints the
tables per dataset and writes OUT/augment.json and, with matplotlib, OUT/augment.png: per dataset, each
loader's images/s against T (with start-up, and after the first batch) and ferry's over the DataLoader's.
--plot JSON draws it again, beside that JSON, from an earlier run's. --quick: 512 images (2048 in the long
runs), T in 1 and 2, for trying it on a small CPU machine (device cpu).
"""
import argparse
import concurrent.futures
import json
import os
import platform
import resource
import sys
import time

import torch
import torch.utils.data

from bench_support import (figure, image_files, lines, make_image_folder, png_beside, ratio_lines, read_json, run,
                           save, threads_axis)  # bench/, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "configs", "imagenet-train.yaml")
BATCH = 256
CROP = 224
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
DATASETS = [("256x256", "256"), ("imagenet-like", "imagenet")]


def log(message):
    print(f"augment: {message}", file=sys.stderr, flush=True)


def cpu_seconds():
    """User + system seconds of this process and of its waited-for children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# ------------------------------------------------------------------------------------------ ferry

def ferry_supports_gpu_decode(ferry):
    """Whether this ferry build decodes JPEGs on the GPU (`ferry version` says so)."""
    return "nvjpeg: yes" in run([ferry, "version"]).stdout


def ferry_rate(ferry, root, threads, images, device, decode_device, out):
    report = os.path.join(out, f"ferry-{os.path.basename(root)}-{decode_device}-{threads}.json")
    command = [ferry, "run", CONFIG, "--set", f"source.root={root}", "--set", f"decode.threads={threads}",
               "--set", f"transfer.device={device}", "--set", "stats.progress=off", "--set", "sampler.epochs=100",
               "--set", f"max_batches={images // BATCH}", "--report", report]
    if decode_device != "cpu":
        command += ["--set", f"source.image.device={decode_device}"]
    before = cpu_seconds()
    run(command)
    cpu = cpu_seconds() - before
    with open(report) as f:
        document = json.load(f)
    totals = document["totals"]
    gpu = document.get("gpu_decode")  # present where a jpeg field is decoded on the GPU
    decoded = gpu["gpu_images"] + gpu["cpu_images"] if gpu else 0
    return {"images_per_second": totals["samples_per_second"], "cpu_seconds_per_image": cpu / totals["samples"],
            "images": totals["samples"], "first_batch_seconds": totals["first_batch_seconds"],
            "images_per_second_after_first_batch": totals["samples_per_second_after_first_batch"],
            "gpu_share": gpu["gpu_images"] / decoded if decoded else 0.0}


# ------------------------------------------------------------------------------------- torchvision

def transforms_module():
    """torchvision.transforms.v2 and its functional module; the v1 API where v2 is missing (torchvision
    before 0.15, e.g. Debian 12's, for --quick runs): the same crops, flips and normalization."""
    try:
        from torchvision.transforms import v2
        from torchvision.transforms.v2 import functional
        return v2, functional, "v2"
    except ImportError:
        from torchvision import transforms
        from torchvision.transforms import functional
        return transforms, functional, "v1"


def transforms_v2(normalize_in_worker):
    v2, _, version = transforms_module()
    steps = [v2.RandomResizedCrop(CROP, antialias=True), v2.RandomHorizontalFlip(0.5)]
    if normalize_in_worker:
        to_float = (v2.ToDtype(torch.float32, scale=True) if version == "v2" else v2.ConvertImageDtype(torch.float32))
        steps += [to_float, v2.Normalize(MEAN, STD)]
    return v2.Compose(steps)


class AugmentedFiles(torch.utils.data.Dataset):
    """Sample i: files[i % n] read, decoded by torchvision (CHW uint8), then `transform`."""

    def __init__(self, files, labels, length, transform):
        self.files, self.labels, self.length, self.transform = files, labels, length, transform

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        from torchvision.io import ImageReadMode, decode_jpeg, read_file
        i %= len(self.files)
        image = decode_jpeg(read_file(self.files[i]), mode=ImageReadMode.RGB)
        return self.transform(image), self.labels[i]


def normalize_on_device(batch):
    mean = torch.tensor(MEAN, device=batch.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=batch.device).view(1, 3, 1, 1)
    return ((batch.float() / 255 - mean) / std).to(torch.bfloat16)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class LoaderClock:
    """A loader's clock, started at iter(): the rate over the run and the rate after the first batch (the
    steady one, without start-up: worker processes, a GPU decoder's set-up), as ferry's report has them."""

    def __init__(self, device):
        self.device, self.start, self.first, self.first_images, self.images = device, time.perf_counter(), None, 0, 0

    def batch(self, images):
        if self.first is None:
            synchronize(self.device)
            self.first, self.first_images = time.perf_counter() - self.start, images
        self.images += images

    def result(self, cpu_before):
        synchronize(self.device)
        seconds = time.perf_counter() - self.start
        after = seconds - (self.first or 0.0)
        steady = (self.images - self.first_images) / after if self.first is not None and after > 0 else 0.0
        # Worker processes are children this process waited for once the loader's iterator ended.
        return {"images_per_second": self.images / seconds,
                "cpu_seconds_per_image": (cpu_seconds() - cpu_before) / self.images, "images": self.images,
                "first_batch_seconds": self.first or 0.0, "images_per_second_after_first_batch": steady}


def dataloader_rate(files, labels, threads, images, device, normalize_in_worker):
    dataset = AugmentedFiles(files, labels, images, transforms_v2(normalize_in_worker))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=threads,
                                         pin_memory=device.type == "cuda", persistent_workers=False)
    before = cpu_seconds()
    clock = LoaderClock(device)
    for batch, label in loader:
        batch = batch.to(device, non_blocking=True)
        label = label.to(device, non_blocking=True)
        batch = batch.to(torch.bfloat16) if normalize_in_worker else normalize_on_device(batch)
        assert batch.shape[1:] == (3, CROP, CROP), batch.shape
        clock.batch(batch.shape[0])
    return clock.result(before)


def torchvision_gpu_rate(files, labels, threads, images, device):
    from torchvision.io import ImageReadMode, decode_jpeg, read_file
    crop_flip = transforms_v2(normalize_in_worker=False)
    before = cpu_seconds()
    clock = LoaderClock(device)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for first in range(0, images, BATCH):
            names = [files[i % len(files)] for i in range(first, min(images, first + BATCH))]
            encoded = list(pool.map(read_file, names))
            decoded = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
            out = [crop_flip(image) for image in decoded]
            batch = normalize_on_device(torch.stack(out))
            # The labels go to the device too, as every other loader delivers them.
            torch.tensor([labels[i % len(files)] for i in range(first, first + len(names))]).to(device)
            clock.batch(batch.shape[0])
    return clock.result(before)


# ------------------------------------------------------------------------------------------- main

def plot(result, path):
    """OUT/augment.png: per dataset, images/s against threads (ferry solid, the baselines dashed) with start-up
    and after the first batch, and each ferry loader over the DataLoader at as many workers."""
    rows = result["rows"]
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    drawn, axes = figure(3 * len(datasets), f"training-ready batches of {BATCH} x {CROP}x{CROP} on {result['device']}, "
                         f"{result['cores']} cores, {result['images']} images a point", rows=len(datasets))
    if drawn is None:
        return
    for i, dataset in enumerate(datasets):
        rates, steady, ratios = axes[3 * i:3 * i + 3]
        mine = [r for r in rows if r["dataset"] == dataset]
        loaders = list(dict.fromkeys(r["loader"] for r in mine))
        styles = {loader: {"color": f"C{k}", "linestyle": "-" if loader.startswith("ferry") else "--"}
                  for k, loader in enumerate(loaders)}
        for axis, key, what in ((rates, "images_per_second", "from the loader's start"),
                                (steady, "images_per_second_after_first_batch", "after the first batch")):
            lines(axis, {loader: [(r["threads"], r[key]) for r in mine if r["loader"] == loader] for loader in loaders},
                  "threads / workers", "images/s", styles)
            axis.set_title(f"{dataset}: images/s {what}", fontsize=9)
        dataloader = {r["threads"]: r["images_per_second"] for r in mine if r["loader"] == "DataLoader"}
        ratio_lines(ratios, {f"{loader} / DataLoader": [(r["threads"], r["images_per_second"] / dataloader[r["threads"]])
                                                        for r in mine if r["loader"] == loader
                                                        and r["threads"] in dataloader]
                             for loader in loaders if loader.startswith("ferry")},
                    "threads / workers", "rate over the DataLoader's")
        ratios.set_title(f"{dataset}: ferry over the DataLoader (v2 in its workers)", fontsize=9)
        for axis in (rates, steady, ratios):
            threads_axis(axis, [r["threads"] for r in mine])
    save(drawn, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ferry", help="the ferry command (a build's cli/ferry)")
    parser.add_argument("--data", help="where the datasets are (made when missing)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default="augment-results")
    parser.add_argument("--threads", default="1,4,16")
    parser.add_argument("--images", type=int, default=8192, help="images delivered per measurement")
    parser.add_argument("--long-images", type=int, default=131072,
                        help="images of ferry's long runs, at the largest thread count (0: none)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plot", metavar="JSON", help="only draw the plot of an earlier run's augment.json, beside it")
    args = parser.parse_args()
    if args.plot:
        return plot(read_json(args.plot), png_beside(args.plot))
    if not args.ferry or not args.data:
        parser.error("--ferry and --data are needed (or --plot JSON)")
    os.makedirs(args.out, exist_ok=True)
    device = torch.device(args.device)
    cores = len(os.sched_getaffinity(0))
    threads = [1, 2] if args.quick else [int(t) for t in args.threads.split(",")]
    threads = [t for t in threads if t <= cores]
    images = 512 if args.quick else args.images
    long_images = 2048 if args.quick else args.long_images
    samples = 512 if args.quick else 4096
    gpu_decode = device.type == "cuda" and ferry_supports_gpu_decode(args.ferry)
    if device.type == "cuda":
        torch.ones(1, device=device)  # CUDA initialised before any clock starts

    results = []
    long_rows = []
    for name, size in DATASETS:
        root = os.path.join(args.data, f"augment-{name}")
        make_image_folder(args.ferry, root, samples, size, ".augment-bench.json", log)
        files, labels = image_files(root)
        for t in threads:
            loaders = [("ferry cpu", lambda: ferry_rate(args.ferry, root, t, images, args.device, "cpu", args.out))]
            if gpu_decode:
                for mode in ("gpu", "auto"):
                    loaders.append((f"ferry {mode}",
                                    lambda mode=mode: ferry_rate(args.ferry, root, t, images, args.device, mode,
                                                                 args.out)))
            loaders.append(("DataLoader", lambda: dataloader_rate(files, labels, t, images, device, True)))
            loaders.append(("DataLoader, normalize on GPU",
                            lambda: dataloader_rate(files, labels, t, images, device, False)))
            if device.type == "cuda":
                loaders.append(("torchvision GPU", lambda: torchvision_gpu_rate(files, labels, t, images, device)))
            for loader, measure in loaders:
                log(f"{name}, {loader}, {t} threads")
                row = {"dataset": name, "loader": loader, "threads": t, **measure()}
                log(f"  {row['images_per_second']:.0f} images/s, {row['cpu_seconds_per_image'] * 1e3:.2f} ms CPU "
                    f"an image")
                results.append(row)
        # ferry's steady state: `auto`'s GPU decoder starts in the background (about a second on an
        # H200), after a run of --images is over; these runs are long enough to show both paths at work.
        if long_images > 0 and threads:
            modes = ["cpu"] + (["gpu", "auto"] if gpu_decode else [])
            for mode in modes:
                log(f"{name}, ferry {mode}, {threads[-1]} threads, {long_images} images")
                long_rows.append({"dataset": name, "loader": f"ferry {mode}", "threads": threads[-1],
                                  **ferry_rate(args.ferry, root, threads[-1], long_images, args.device, mode,
                                               args.out)})

    print(f"torch {torch.__version__}, torchvision transforms {transforms_module()[2]}, device {device}, {cores} cores, "
          f"{images} images a measurement, batches of {BATCH}, {CROP}x{CROP} bfloat16 NCHW")
    tables = [("images/s (CPU ms an image)",
               lambda r: f"{r['images_per_second']:.0f} ({r['cpu_seconds_per_image'] * 1e3:.2f})"),
              ("after the first batch: images/s (first batch after s)",
               lambda r: f"{r['images_per_second_after_first_batch']:.0f} ({r['first_batch_seconds']:.2f})")]
    for name, _ in DATASETS:
        for title, cell in tables:
            print(f"\n{name}: {title}")
            print(f"{'loader':32}" + "".join(f"{f'{t} threads':>22}" for t in threads))
            for loader in dict.fromkeys(r["loader"] for r in results):
                cells = []
                for t in threads:
                    found = [r for r in results if r["dataset"] == name and r["loader"] == loader and r["threads"] == t]
                    cells.append(cell(found[0]) if found else "-")
                print(f"{loader:32}" + "".join(f"{c:>22}" for c in cells))
        rows = [r for r in long_rows if r["dataset"] == name]
        if rows:
            print(f"\n{name}: ferry over {long_images} images, {rows[0]['threads']} threads")
            print(f"{'loader':32}{'images/s':>12}{'after the first batch':>24}{'first batch (s)':>17}"
                  f"{'on the GPU':>12}")
            for r in rows:
                print(f"{r['loader']:32}{r['images_per_second']:>12.0f}{r['images_per_second_after_first_batch']:>24.0f}"
                      f"{r['first_batch_seconds']:>17.2f}{r['gpu_share'] * 100:>11.0f}%")
    result = {"machine": platform.node(), "device": str(device), "torch": torch.__version__,
              "transforms": transforms_module()[2], "cores": cores, "images": images, "gpu_decode": gpu_decode,
              "rows": results, "long_images": long_images, "long_rows": long_rows}
    with open(os.path.join(args.out, "augment.json"), "w") as f:
        json.dump(result, f, indent=2)
    plot(result, os.path.join(args.out, "augment.png"))


if __name__ == "__main__":
    sys.exit(main())
