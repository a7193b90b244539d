#!/usr/bin/env python3
"""bench/detection.py: detection batches (images with their boxes and labels), ferry beside torch's
DataLoader with torchvision's v2 transforms, on the same tar shards, cores and device, in one run.

    python3 bench/detection.py --data build/gpu/bench-data/detection --device cuda --out gpu-results/detection \\
        [--workers 4,16] [--images 4096] [--quick]

The dataset (made in --data when missing, with Pillow): JPEGs whose longer side is 300..1333 pixels, q90,
each with 0..50 boxes and their labels in the sample's `.json` ({"boxes": [[x1, y1, x2, y2], ...],
"labels": [...]}), in tar shards of 512 samples. Both loaders make the same training-ready batch of 32:
a random-resized crop of the whole image to 512 x 512 (scale 0.3..1, ratio 3/4..4/3), a horizontal flip
with probability 0.5, the boxes moved with the image, clipped, and dropped with their labels where too
little stays (ferry: under a quarter of the box's area; torchvision v2 has no such rule, so
SanitizeBoundingBoxes drops those under 1 square pixel); uint8 images [32, 512, 512, 3] (NHWC, ferry)
or [32, 3, 512, 512] (torchvision), and each sample's boxes and labels, all on the device.

  ferry cpu   decode.threads W: libjpeg-turbo on W threads, the crop's resample and the boxes there too;
  ferry gpu   the same with the jpeg decoder's device: gpu (nvJPEG's hardware decoder, the crop's resample
              on the GPU; the boxes on the CPU threads, from each image's window), where the build has it;
  DataLoader  num_workers W, each sample read from the shard's index by a map-style Dataset, decoded by
              torchvision.io.decode_jpeg, transformed by v2 (RandomResizedCrop, RandomHorizontalFlip,
              SanitizeBoundingBoxes with min_area), collated (images stacked, boxes and labels as lists),
              pin_memory, then .to(device, non_blocking=True).

Rates: images / wall time, from the loader's start to a device synchronize after the last batch; CPU:
user + system seconds of every process of the loader (this one and the DataLoader's workers) per image.
Prints the table, writes OUT/detection.json and, with matplotlib, OUT/detection.png (--plot JSON draws it
again, beside that JSON, from an earlier run's). --quick: 256 images, workers 1 and 2, for a small CPU
machine (device cpu).
"""
import argparse
import io
import json
import os
import platform
import resource
import sys
import tarfile
import time

import numpy as np
import torch
import torch.utils.data

import ferry
from bench_support import figure, lines, png_beside, read_json, save, threads_axis  # bench/, beside this script

BATCH = 32
SIZE = 512
SCALE = (0.3, 1.0)
SHARD_SAMPLES = 512


def log(message):
    print(f"detection: {message}", file=sys.stderr, flush=True)


def cpu_seconds():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------------------ dataset

def make_dataset(root, samples):
    """Tar shards of JPEGs (longer side 300..1333) with their boxes; returns the shard paths."""
    from PIL import Image
    os.makedirs(root, exist_ok=True)
    count = (samples + SHARD_SAMPLES - 1) // SHARD_SAMPLES
    shards = [os.path.join(root, f"detection-{s:04d}.tar") for s in range(count)]
    stamp = os.path.join(root, f"made-{samples}")
    if os.path.exists(stamp):
        return shards
    rng = np.random.default_rng(0)
    log(f"writing {samples} images in {len(shards)} shards to {root}")
    for s, path in enumerate(shards):
        with tarfile.open(path, "w") as tar:
            for key in range(s * SHARD_SAMPLES, min(samples, (s + 1) * SHARD_SAMPLES)):
                longer = int(rng.integers(300, 1334))
                shorter = int(longer * rng.uniform(0.5, 1.0))
                height, width = (shorter, longer) if rng.random() < 0.7 else (longer, shorter)
                y, x = np.mgrid[0:height, 0:width]
                image = np.stack([(x * (c + 1) // 7 + y // (c + 2)) % 256 for c in range(3)], -1).astype(np.uint8)
                count = int(rng.integers(0, 51))
                x1 = rng.uniform(0, width - 8, count)
                y1 = rng.uniform(0, height - 8, count)
                boxes = np.stack([x1, y1, np.minimum(x1 + rng.uniform(4, width / 3, count), width),
                                  np.minimum(y1 + rng.uniform(4, height / 3, count), height)], 1)
                for box in boxes.astype(int):
                    image[box[1]:box[3], box[0]:box[2]] //= 2
                jpeg = io.BytesIO()
                Image.fromarray(image).save(jpeg, format="JPEG", quality=90)
                target = json.dumps({"boxes": boxes.round(2).tolist(), "labels": rng.integers(0, 80, count).tolist()})
                for extension, data in (("jpg", jpeg.getvalue()), ("json", target.encode())):
                    info = tarfile.TarInfo(f"{key:08d}.{extension}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    open(stamp, "w").close()
    return shards


# ------------------------------------------------------------------------------------------ ferry

def ferry_config(shards, workers, device, decode_device, images):
    return {
        "source": {"kind": "tar", "shards": shards, "members": [
            {"name": "image", "extension": "jpg", "decoder": "jpeg", "shape": [SIZE, SIZE, 3],
             "crop": "random_resized", "scale": list(SCALE), "flip": 0.5, "window": True, "device": decode_device},
            {"name": "boxes", "extension": "json", "decoder": "json", "select": "/boxes", "dtype": "float32",
             "shape": [None, 4], "max_length": 64},
            {"name": "labels", "extension": "json", "decoder": "json", "select": "/labels", "dtype": "int64",
             "shape": [None], "max_length": 64}]},
        "transforms": [{"kind": "boxes", "window": "image_window", "boxes": ["boxes"], "follow": ["labels"],
                        "min_visible": 0.25}],
        "collate": {"lists": ["boxes", "labels"]},
        "batch_size": BATCH, "max_batches": images // BATCH, "prefetch": 8,
        "sampler": {"shuffle": True, "seed": 1, "epochs": 100},
        "decode": {"threads": workers},
        "transfer": {"device": str(device)},
    }


def ferry_rate(shards, workers, device, decode_device, images):
    before, start = cpu_seconds(), time.perf_counter()
    delivered = 0
    with ferry.Pipeline(ferry_config(shards, workers, device, decode_device, images)) as pipeline:
        for batch in pipeline.batches():
            assert batch["image"].shape == (BATCH, SIZE, SIZE, 3)
            delivered += batch["image"].shape[0]
        synchronize(device)
        seconds = time.perf_counter() - start
        stats = pipeline.stats()
    gpu = stats.get("gpu_decode") or {}
    decoded = gpu.get("gpu_images", 0) + gpu.get("cpu_images", 0)
    return {"images_per_second": delivered / seconds, "cpu_ms_per_image": 1e3 * (cpu_seconds() - before) / delivered,
            "images": delivered, "gpu_share": gpu.get("gpu_images", 0) / decoded if decoded else 0.0}


# ------------------------------------------------------------------------------------ torchvision

class ShardSamples(torch.utils.data.Dataset):
    """Sample i of the shards: its JPEG and targets read through an index of member offsets, made once."""

    def __init__(self, shards, length, transform):
        self.members, self.length, self.transform = [], length, transform
        for path in shards:
            with tarfile.open(path) as tar:
                entries = {}
                for info in tar:
                    key, extension = info.name.split(".", 1)
                    entries.setdefault(key, {})[extension] = (path, info.offset_data, info.size)
                self.members += [entries[key] for key in sorted(entries)]

    def __len__(self):
        return self.length

    def _read(self, where):
        path, offset, size = where
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(size)

    def __getitem__(self, i):
        from torchvision import tv_tensors
        from torchvision.io import ImageReadMode, decode_jpeg
        members = self.members[i % len(self.members)]
        image = decode_jpeg(torch.frombuffer(bytearray(self._read(members["jpg"])), dtype=torch.uint8),
                            mode=ImageReadMode.RGB)
        target = json.loads(self._read(members["json"]))
        boxes = tv_tensors.BoundingBoxes(torch.tensor(target["boxes"], dtype=torch.float32).reshape(-1, 4),
                                         format="XYXY", canvas_size=tuple(image.shape[-2:]))
        image, out = self.transform(image, {"boxes": boxes, "labels": torch.tensor(target["labels"])})
        return image, out["boxes"].as_subclass(torch.Tensor), out["labels"]


def collate(samples):
    images, boxes, labels = zip(*samples)
    return torch.stack(images), list(boxes), list(labels)


def dataloader_rate(shards, workers, device, images):
    from torchvision.transforms import v2
    transform = v2.Compose([v2.RandomResizedCrop(SIZE, scale=SCALE, antialias=True), v2.RandomHorizontalFlip(0.5),
                            v2.ClampBoundingBoxes(), v2.SanitizeBoundingBoxes(min_area=1.0)])
    dataset = ShardSamples(shards, images, transform)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=workers, collate_fn=collate,
                                         shuffle=True, pin_memory=device.type == "cuda")
    before, start = cpu_seconds(), time.perf_counter()
    delivered = 0
    for image, boxes, labels in loader:
        image = image.to(device, non_blocking=True)
        boxes = [b.to(device, non_blocking=True) for b in boxes]
        labels = [b.to(device, non_blocking=True) for b in labels]
        delivered += image.shape[0]
    synchronize(device)
    seconds = time.perf_counter() - start
    return {"images_per_second": delivered / seconds, "cpu_ms_per_image": 1e3 * (cpu_seconds() - before) / delivered,
            "images": delivered}


# ------------------------------------------------------------------------------------------ main

def plot(result, path):
    """OUT/detection.png: images/s against workers, one line a loader."""
    rows = result["rows"]
    drawn, (axis,) = figure(1, f"detection batches of {result['batch']}, {result['size']}x{result['size']}, "
                            f"{result['device']}", width=6)
    if drawn is None:
        return
    measured = [r for r in rows if "error" not in r]  # a loader that could not run here is a row that says so
    lines(axis, {name: [(r["workers"], r["images_per_second"]) for r in measured if r["loader"] == name]
                 for name in dict.fromkeys(r["loader"] for r in rows)},
          "workers (decode threads / DataLoader workers)", "images / s")
    threads_axis(axis, [r["workers"] for r in rows])
    save(drawn, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data")
    parser.add_argument("--out")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--workers", default="4,16")
    parser.add_argument("--images", type=int, default=4096)
    parser.add_argument("--dataset-images", type=int, default=2048)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plot", metavar="JSON",
                        help="only draw the plot of an earlier run's detection.json, beside it")
    args = parser.parse_args()
    if args.plot:
        return plot(read_json(args.plot), png_beside(args.plot))
    if not args.data or not args.out:
        parser.error("--data and --out are needed (or --plot JSON)")
    if args.quick:
        args.workers, args.images, args.dataset_images = "1,2", 256, 256
    device = torch.device(args.device)
    cores = len(os.sched_getaffinity(0))
    workers = [w for w in (int(x) for x in args.workers.split(",")) if w <= cores] or [cores]
    os.makedirs(args.out, exist_ok=True)
    shards = make_dataset(args.data, args.dataset_images)
    try:
        import torchvision  # noqa: F401
        have_torchvision = hasattr(__import__("torchvision.transforms.v2", fromlist=["v2"]), "SanitizeBoundingBoxes")
    except ImportError:
        have_torchvision = False
    gpu_decode = device.type == "cuda"  # a build without nvJPEG says so in its row
    rows = []
    for w in workers:
        loaders = [("ferry cpu", lambda: ferry_rate(shards, w, device, "cpu", args.images))]
        if gpu_decode:
            loaders.append(("ferry gpu", lambda: ferry_rate(shards, w, device, "gpu", args.images)))
        if have_torchvision:
            loaders.append(("DataLoader", lambda: dataloader_rate(shards, w, device, args.images)))
        for name, measure in loaders:
            log(f"{name}, {w} workers")
            try:
                result = measure()
            except Exception as e:  # a loader that cannot run here (no nvJPEG) is a row that says so
                result = {"error": f"{type(e).__name__}: {e}"}
            rows.append({"loader": name, "workers": w, **result})
    baseline = {r["workers"]: r["images_per_second"] for r in rows if r["loader"] == "DataLoader" and "error" not in r}
    print(f"\ndetection batches of {BATCH} x {SIZE}^2, {args.images} images, torch {torch.__version__}, device "
          f"{device}, {cores} cores, {platform.node()}")
    print(f"{'loader':<12} {'workers':>7} {'images/s':>10} {'CPU ms/img':>10} {'x DataLoader':>13}")
    for r in rows:
        if "error" in r:
            print(f"{r['loader']:<12} {r['workers']:>7}  {r['error']}")
            continue
        ratio = r["images_per_second"] / baseline[r["workers"]] if r["workers"] in baseline else float("nan")
        r["ratio_to_dataloader"] = ratio
        print(f"{r['loader']:<12} {r['workers']:>7} {r['images_per_second']:>10.0f} {r['cpu_ms_per_image']:>10.2f} "
              f"{ratio:>13.2f}")
    result = {"batch": BATCH, "size": SIZE, "images": args.images, "device": str(device), "cores": cores,
              "torch": torch.__version__, "rows": rows}
    with open(os.path.join(args.out, "detection.json"), "w") as f:
        json.dump(result, f, indent=2)
    plot(result, os.path.join(args.out, "detection.png"))


if __name__ == "__main__":
    main()
