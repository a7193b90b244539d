#!/usr/bin/env python3
"""bench/loaders.py: ferry beside torch's DataLoader, on the same files, cores and device, in one run.

    python3 bench/loaders.py --ferry build/gpu/cli/ferry --data build/gpu/bench-data --device cuda \\
        --out gpu-results/loaders [--quick]

Needs a Python with torch, numpy and Pillow. Makes its data with `ferry make-dataset` when --data
lacks it (kept for the next run), then measures two workloads:

images   JPEG files of 256 x 256 (ferry make-dataset images: 10 class folders), decoded to HWC uint8
         RGB and delivered in batches of 256 with their labels. For each T in 1, 2, 4, 8, 16 (not above
         the cores this process may use):
           ferry       `ferry run` of an image_folder config with decode.threads T (jpeg decoder,
                       libjpeg-turbo), prefetch 4;
           DataLoader  num_workers T, each sample opened with PIL, Image.open(p).convert("RGB") ->
                       torch.from_numpy(np.asarray(img)), default collate, pin_memory when on cuda,
                       each batch .to(device, non_blocking=True).
tokens   windows of seq_len 2048 + 1 tokens over a Megatron-LM token dataset (ferry make-dataset tokens),
         batches of 32 in a seeded shuffled order:
           ferry       `ferry run configs/megatron.yaml` with decode.threads T;
           DataLoader  num_workers T over numpy.memmap of the .bin, window i = tokens[i*2048 : i*2048+2049]
                       (what ferry's TokenWindowSource reads), in the dtype ferry delivers, RandomSampler
                       seeded, pin_memory when on cuda, each batch .to(device, non_blocking=True).
         tokens/s counts the 2049 tokens each sample delivers.

Both loaders deliver the same number of batches of the same samples (images: the same files in the
same order; tokens: the same windows, each loader in its own shuffled order). Before timing, a few
batches of each loader are checked to be bit-identical to ferry's, through `ferry run --digest`.

What the rates include. ferry: its report's samples_per_second = samples / wall_seconds, where the
wall time runs from the pipeline's start (after the process started, CUDA was initialised and the
pinned pool was allocated) to the last batch ready on the device. DataLoader, "incl. start":
samples / time from iter(loader) (which starts the workers) to the last batch on the device
(torch.cuda.synchronize()), after CUDA and the pinned-memory cache were warmed in this process, so
both clocks cover the same span: the loader's own start-up and every batch. "after 1st" leaves out
the first batch (worker start-up and the first batch's latency) and counts the rest; speed-up x is
ferry / DataLoader incl. start.

Prints one table per workload and writes OUT/loaders.json (OUT also keeps the configs and ferry's
reports) and, with matplotlib, OUT/loaders.png: each workload's rate against T for both loaders (the
DataLoader after its first batch dashed), and ferry / DataLoader. --plot JSON draws it again, beside that
JSON, from an earlier run's. --quick: little data, T in 1 and 2, for trying it on a small CPU machine.
"""
import argparse
import json
import os
import platform
import sys
import time
import warnings

import numpy as np
import torch
import torch.utils.data
from PIL import Image

from batch_digest import fields_digest, indices_digest  # bench/, beside this script
from bench_support import (figure, image_files, lines, made_before, make_image_folder, png_beside, ratio_lines,
                           read_json, run, save, stamp_made, threads_axis)

SEQ_LEN = 2048
WINDOW = SEQ_LEN + 1  # configs/megatron.yaml: add_extra_token
TOKEN_BATCH = 32
TOKEN_SEED = 1234
IMAGE_SIZE = 256
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Megatron's .idx dtype codes (Note [MMIDIDX layout], io/formats/indexed_dataset_format.h).
IDX_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}


# np.asarray(img) is a read-only view of PIL's pixels; the tensor is only read, so no copy is made.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def log(message):
    print(f"loaders: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- data

def make_images(ferry, root, samples):
    """ferry make-dataset images ROOT (class-000/000000.jpg, ...), unless ROOT already holds it."""
    make_image_folder(ferry, root, samples, IMAGE_SIZE, ".loaders-bench.json", log)


def make_tokens(ferry, prefix, documents):
    """ferry make-dataset tokens PREFIX with `documents` documents, unless PREFIX already holds what a run
    with the same count made (PREFIX.loaders-bench.json records it); one made with another count is made
    again, files no benchmark made are left alone."""
    stamp = prefix + ".loaders-bench.json"
    wanted = {"documents": documents}
    if made_before(stamp, wanted, [prefix + ".bin", prefix + ".idx"], prefix, log):
        return
    log(f"making a token dataset of {documents} documents at {prefix}")
    result = run([ferry, "make-dataset", "tokens", prefix, "--documents", documents])
    log(result.stdout.strip())
    stamp_made(stamp, wanted)


def read_token_index(prefix):
    """(numpy dtype, total tokens) of a Megatron-LM indexed dataset."""
    with open(prefix + ".idx", "rb") as f:
        header = f.read(34)
    if header[:9] != b"MMIDIDX\x00\x00":
        raise RuntimeError(f"{prefix}.idx is not a Megatron-LM index")
    dtype = np.dtype(IDX_DTYPES[header[17]])
    total = os.path.getsize(prefix + ".bin") // dtype.itemsize  # sequences are contiguous (the format)
    return dtype, total


# ------------------------------------------------------------------------------------------- datasets

class ImageFiles(torch.utils.data.Dataset):
    """`length` samples cycling through `files`: sample i is files[i % len(files)], as ferry's sequential
    sampler visits epoch after epoch. Returns (HWC uint8 image, int64 label)."""

    def __init__(self, files, labels, length):
        self.files, self.labels, self.length = files, labels, length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        i %= len(self.files)
        with Image.open(self.files[i]) as img:
            pixels = np.asarray(img.convert("RGB"))
        return torch.from_numpy(pixels), torch.tensor(self.labels[i], dtype=torch.int64)


class TokenWindows(torch.utils.data.Dataset):
    """Window i of the .bin's tokens, read as ferry's TokenWindowSource reads it: the documents back to
    back, tokens [i * SEQ_LEN, i * SEQ_LEN + WINDOW). `wide`: widened to int32 (ferry on a libtorch
    without uint16); otherwise the stored dtype, carried as same-width signed bytes (default collate
    and pinning know int16 everywhere; the device view turns it back)."""

    def __init__(self, prefix, dtype, total, wide):
        self.path, self.dtype, self.wide = prefix + ".bin", dtype, wide
        self.length = (total - 1) // SEQ_LEN
        self.tokens = None  # mapped in each worker on first use

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        if self.tokens is None:
            self.tokens = np.memmap(self.path, dtype=self.dtype, mode="r")
        window = self.tokens[i * SEQ_LEN: i * SEQ_LEN + WINDOW]
        if self.wide:
            return torch.from_numpy(np.array(window, dtype=np.int32))
        signed = np.dtype(f"i{self.dtype.itemsize}")
        return torch.from_numpy(np.array(window).view(signed))


def device_view(tensor, dtype):
    """The delivered tensor as `dtype` (a free reinterpretation of the same bytes)."""
    return tensor if tensor.dtype == dtype else tensor.view(dtype)


# ------------------------------------------------------------------------------------- measurements

def warm_up(device, batch_bytes):
    """What ferry does before its clock starts: CUDA initialised, pinned staging memory allocated (here:
    blocks left in torch's pinned-memory cache, which the pin thread then reuses)."""
    if device.type != "cuda":
        return
    torch.zeros(1, device=device)
    blocks = [torch.empty(batch_bytes, dtype=torch.uint8).pin_memory() for _ in range(4)]
    for block in blocks:
        block.to(device, non_blocking=True)
    torch.cuda.synchronize(device)
    del blocks



def comparison_point(threads, batches, samples, ferry_report, loader):
    """One row of a part's table: ferry's report and the DataLoader's timing at `threads`."""
    ferry_rate = ferry_report["totals"]["samples_per_second"]
    return {"threads": threads, "batches": batches, "samples": samples,
            "ferry_samples_per_second": ferry_rate, "ferry_wall_seconds": ferry_report["totals"]["wall_seconds"],
            "ferry_bottleneck": ferry_report["bottleneck"],
            "dataloader_samples_per_second": loader["samples_per_second"],
            "dataloader_after_first_samples_per_second": loader["after_first_samples_per_second"],
            "dataloader_seconds": loader["seconds"],
            "dataloader_first_batch_seconds": loader["first_batch_seconds"],
            "speedup": ferry_rate / loader["samples_per_second"]}

def time_dataloader(dataset, batch_size, workers, device, batches, sampler=None, deliver=None):
    """Takes `batches` batches; returns seconds from iter() to the last one on the device, and from the
    first one's arrival (on the device) to the same end."""
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                                         pin_memory=device.type == "cuda", persistent_workers=False)
    cuda = device.type == "cuda"
    start = time.perf_counter()
    iterator = iter(loader)
    first = None
    taken = samples = 0
    for batch in iterator:
        parts = batch if isinstance(batch, (list, tuple)) else [batch]
        on_device = [p.to(device, non_blocking=True) for p in parts]
        if deliver is not None:
            deliver(on_device)
        samples += on_device[0].shape[0]
        taken += 1
        if first is None:
            if cuda:
                torch.cuda.synchronize(device)
            first = (time.perf_counter(), on_device[0].shape[0])
        if taken == batches:
            break
    if cuda:
        torch.cuda.synchronize(device)
    end = time.perf_counter()
    del iterator  # shuts the workers down, off the clock
    if taken != batches:
        raise RuntimeError(f"the DataLoader gave {taken} batches, {batches} wanted")
    return {"samples": samples, "seconds": end - start, "samples_per_second": samples / (end - start),
            "after_first_samples_per_second": (samples - first[1]) / (end - first[0]) if taken > 1 else 0.0,
            "first_batch_seconds": first[0] - start}


def ferry_run(ferry, config, sets, batches, report, digest=None):
    command = [ferry, "run", config, "--batches", batches, "--report", report, "--set", "stats.progress=off"]
    for s in sets:
        command += ["--set", s]
    if digest:
        command += ["--digest", digest]
    result = run(command, cwd=REPO)
    with open(report) as f:
        data = json.load(f)
    totals = data["totals"]
    if data["run"]["exit_status"] != 0 or totals["batches"] != batches:
        raise RuntimeError(f"ferry run {config}: {totals['batches']} of {batches} batches, "
                           f"error '{data['run']['error']}'\n{result.stdout[-2000:]}")
    return data


# ------------------------------------------------------------------------------------------ checking

def digest_line(indices, fields):
    """What cli/batch_digest.cpp writes for a batch, from `samples` on (bench/batch_digest.py)."""
    return f"samples {len(indices)} indices {indices_digest(indices)} bytes {fields_digest(fields)}"


def ferry_digest_lines(path):
    with open(path) as f:
        return [line[line.index(" samples ") + 1:].strip() for line in f]


def check_same_batches(what, ferry_lines, loader_lines):
    if ferry_lines != loader_lines:
        raise RuntimeError(f"{what}: the DataLoader's batches differ from ferry's:\n  ferry:      "
                           + "\n              ".join(ferry_lines) + "\n  DataLoader: "
                           + "\n              ".join(loader_lines))
    log(f"{what}: {len(ferry_lines)} batches bit-identical to ferry's (--digest)")


# ----------------------------------------------------------------------------------------- workloads

def image_config(out, root, batch_size, device):
    path = os.path.join(out, "images-ferry.yaml")
    with open(path, "w") as f:
        f.write(f"""# Written by bench/loaders.py: the images workload (decode.threads and epochs are set per run).
source:
  kind: image_folder
  root: '{os.path.abspath(root).replace("'", "''")}'
  image: {{shape: [{IMAGE_SIZE}, {IMAGE_SIZE}, 3]}}    # decoder: jpeg (libjpeg-turbo), the file's own size

batch_size: {batch_size}
prefetch: 4
sampler: {{shuffle: false}}
transfer: {{device: {device}}}
""")
    return path


def bench_images(args, device, threads, out):
    root = os.path.join(args.data, "images")
    samples = 512 if args.quick else 8192
    batch_size = 64 if args.quick else 256
    make_images(args.ferry, root, samples)
    files, labels = image_files(root)
    if len(files) != samples:
        raise RuntimeError(f"{root}: {len(files)} JPEGs, {samples} expected")
    with Image.open(files[0]) as img:
        if img.size != (IMAGE_SIZE, IMAGE_SIZE):
            raise RuntimeError(f"{files[0]}: {img.size[0]}x{img.size[1]}, {IMAGE_SIZE}x{IMAGE_SIZE} expected")
    config = image_config(out, root, batch_size, args.device)
    mean_kb = sum(os.path.getsize(p) for p in files) / len(files) / 1e3
    batch_bytes = batch_size * IMAGE_SIZE * IMAGE_SIZE * 3

    # Same pixels? PIL and ferry both decode with libjpeg-turbo's default (accurate) IDCT and fancy
    # upsampling; different library versions could still differ, and then the speeds are not comparable.
    check = 2
    digest = os.path.join(out, "images-digest.txt")
    ferry_run(args.ferry, config, ["batch_size=%d" % check, "decode.threads=1", "transfer.device=cpu"], 2,
              os.path.join(out, "images-check.json"), digest)
    dataset = ImageFiles(files, labels, 2 * check)
    lines = []
    for b, (image, label) in enumerate(torch.utils.data.DataLoader(dataset, batch_size=check)):
        lines.append(digest_line(range(b * check, (b + 1) * check), [("image", image), ("label", label)]))
    check_same_batches("images", ferry_digest_lines(digest), lines)

    warm_up(device, batch_bytes)
    points = []
    for t in threads:
        # ferry decodes about 2900 images/s per thread on an H100 host: 24 batches per thread keep it
        # busy about 2 s per point, the DataLoader 2.5 to 10 s (the files are read up to 12 times).
        batches = min(4 * t, 8) if args.quick else 24 * t
        epochs = -(-batches * batch_size // samples)
        report = os.path.join(out, f"images-ferry-{t}.json")
        data = ferry_run(args.ferry, config, [f"decode.threads={t}", f"sampler.epochs={epochs}"], batches, report)
        ferry_rate = data["totals"]["samples_per_second"]
        loader = time_dataloader(ImageFiles(files, labels, batches * batch_size), batch_size, t, device, batches)
        points.append(comparison_point(t, batches, batches * batch_size, data, loader))
        log(f"images, {t} threads/workers: ferry {ferry_rate:.0f}/s, DataLoader {loader['samples_per_second']:.0f}/s")
    return {"images": len(files), "image_size": IMAGE_SIZE, "mean_kilobytes": mean_kb, "batch_size": batch_size,
            "unit": "images", "points": points}


def bench_tokens(args, device, threads, out):
    prefix = os.path.join(args.data, "tokens")
    documents = args.documents or (4000 if args.quick else 320000)
    make_tokens(args.ferry, prefix, documents)
    dtype, total = read_token_index(prefix)
    config = os.path.join(REPO, "configs", "megatron.yaml")
    quoted = os.path.abspath(prefix).replace("'", "''")
    base_sets = [f"source.prefix='{quoted}'", f"transfer.device={args.device}"]

    # What ferry delivers (Note [uint16 tokens] in io/formats/token_window_source.cpp): uint16 stays uint16 on
    # a libtorch that has it, else it is widened to int32. The DataLoader delivers the same.
    digest = os.path.join(out, "tokens-digest.txt")
    check_batches = 3
    data = ferry_run(args.ferry, config, base_sets + ["sampler.shuffle=false", "transfer.device=cpu"], check_batches,
                     os.path.join(out, "tokens-check.json"), digest)
    wide = "as int32" in data["run"]["source"]
    delivered = torch.int32 if wide else {np.dtype(np.uint16): getattr(torch, "uint16", None), np.dtype(np.int32): torch.int32,
                                         np.dtype(np.int64): torch.int64, np.dtype(np.uint8): torch.uint8,
                                         np.dtype(np.int8): torch.int8, np.dtype(np.int16): torch.int16}[dtype]
    dataset = TokenWindows(prefix, dtype, total, wide)
    lines = []
    loader = torch.utils.data.DataLoader(dataset, batch_size=TOKEN_BATCH, num_workers=2)
    for b, tokens in enumerate(loader):
        lines.append(digest_line(range(b * TOKEN_BATCH, (b + 1) * TOKEN_BATCH), [("tokens", device_view(tokens, delivered))]))
        if b + 1 == check_batches:
            break
    check_same_batches("tokens", ferry_digest_lines(digest), lines)

    per_epoch = -(-len(dataset) // TOKEN_BATCH)
    # ferry delivers about 10000 batches/s on an H100 host, the DataLoader about 1500.
    batches = args.token_batches or (60 if args.quick else 16000)
    epochs = -(-batches // per_epoch)
    warm_up(device, TOKEN_BATCH * WINDOW * (4 if wide else dtype.itemsize))
    points = []
    for t in threads:
        report = os.path.join(out, f"tokens-ferry-{t}.json")
        data = ferry_run(args.ferry, config, base_sets + [f"decode.threads={t}", f"sampler.epochs={epochs}"], batches, report)
        ferry_rate = data["totals"]["samples_per_second"]
        generator = torch.Generator()
        generator.manual_seed(TOKEN_SEED)
        sampler = torch.utils.data.RandomSampler(dataset, num_samples=batches * TOKEN_BATCH, generator=generator)
        loader = time_dataloader(dataset, TOKEN_BATCH, t, device, batches, sampler=sampler,
                                 deliver=lambda parts: device_view(parts[0], delivered))
        points.append(comparison_point(t, batches, batches * TOKEN_BATCH, data, loader))
        log(f"tokens, {t} threads/workers: ferry {ferry_rate * WINDOW / 1e6:.1f}M tokens/s, "
            f"DataLoader {loader['samples_per_second'] * WINDOW / 1e6:.1f}M tokens/s")
    # The shipped config keeps 4 batches in flight; whether more would help is one ferry run more.
    t = threads[-1]
    data = ferry_run(args.ferry, config, base_sets + [f"decode.threads={t}", f"sampler.epochs={epochs}", "prefetch=16"],
                     batches, os.path.join(out, f"tokens-ferry-{t}-prefetch16.json"))
    more_prefetch = {"threads": t, "prefetch": 16, "ferry_samples_per_second": data["totals"]["samples_per_second"],
                     "ferry_bottleneck": data["bottleneck"]}
    return {"documents": documents, "tokens": total, "stored_dtype": str(dtype), "delivered_dtype": str(delivered),
            "ferry_prefetch_16": more_prefetch,
            "seq_len": SEQ_LEN, "tokens_per_sample": WINDOW, "batch_size": TOKEN_BATCH, "windows": len(dataset),
            "unit": "samples", "points": points}


# ------------------------------------------------------------------------------------------- output

def table(title, points, scale, unit, note):
    lines = [title,
             f"{'threads':>7} {'batches':>7} {'ferry ' + unit:>16} {'per thread':>12} {'DataLoader':>16} "
             f"{'per worker':>12} {'after 1st':>16} {'speed-up':>9}"]
    for p in points:
        t = p["threads"]
        ferry, loader = p["ferry_samples_per_second"] * scale, p["dataloader_samples_per_second"] * scale
        lines.append(f"{t:>7} {p['batches']:>7} {ferry:>16,.0f} {ferry / t:>12,.0f} {loader:>16,.0f} "
                     f"{loader / t:>12,.0f} {p['dataloader_after_first_samples_per_second'] * scale:>16,.0f} "
                     f"{p['speedup']:>8.2f}x")
    lines.append(note)
    return "\n".join(lines)


def plot(result, path):
    """OUT/loaders.png: per workload, the rate against threads/workers of both loaders, and ferry / DataLoader."""
    units = {"images": ("images/s", 1), "tokens": ("M tokens/s", WINDOW / 1e6)}
    workloads = [(name, *units[name]) for name in units if name in result]
    gpu = f" ({result['gpu']})" if result["gpu"] != "none" else ""
    drawn, axes = figure(2 * len(workloads), f"ferry and torch's DataLoader on {result['device']}{gpu}, "
                         f"{result['cores']} cores{', --quick' if result.get('quick') else ''}", rows=len(workloads))
    if drawn is None:
        return
    for (name, unit, scale), rates, ratios in zip(workloads, axes[0::2], axes[1::2]):
        points = result[name]["points"]
        threads = [p["threads"] for p in points]
        lines(rates, {"ferry": [(p["threads"], p["ferry_samples_per_second"] * scale) for p in points],
                      "DataLoader": [(p["threads"], p["dataloader_samples_per_second"] * scale) for p in points],
                      "DataLoader after its 1st batch": [(p["threads"], p["dataloader_after_first_samples_per_second"]
                                                          * scale) for p in points]},
              "threads (ferry) / workers (DataLoader)", unit,
              styles={"DataLoader after its 1st batch": {"linestyle": "--", "color": "tab:orange", "alpha": 0.6}})
        more = result[name].get("ferry_prefetch_16")
        if more:
            rates.plot([more["threads"]], [more["ferry_samples_per_second"] * scale], marker="^", linestyle="",
                       color="tab:blue", label="ferry, prefetch 16")
            rates.legend(fontsize=7)
        rates.set_title(f"{name}: rate, each loader's start included", fontsize=9)
        ratio_lines(ratios, {"ferry / DataLoader": [(p["threads"], p["speedup"]) for p in points]},
                    "threads / workers", "ferry / DataLoader")
        ratios.set_title(f"{name}: ferry's rate over the DataLoader's", fontsize=9)
        for axis in (rates, ratios):
            threads_axis(axis, threads)
    save(drawn, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ferry", help="the ferry binary (build/gpu/cli/ferry)")
    parser.add_argument("--data", help="folder for the datasets (made when missing, then kept)")
    parser.add_argument("--device", choices=["cuda", "cpu"])
    parser.add_argument("--out", help="folder for loaders.json, configs and ferry's reports")
    parser.add_argument("--quick", action="store_true", help="little data, 1 and 2 threads: a check, not a measurement")
    parser.add_argument("--threads", help="comma-separated thread/worker counts (default 1,2,4,8,16 up to the cores)")
    parser.add_argument("--token-threads", help="thread/worker counts for tokens (default 4,16 up to the cores)")
    parser.add_argument("--token-batches", type=int, help="batches per tokens point (default 16000)")
    parser.add_argument("--documents", type=int, help="documents of the token dataset (default 320000)")
    parser.add_argument("--skip", choices=["images", "tokens"], action="append", default=[])
    parser.add_argument("--plot", metavar="JSON", help="only draw the plot of an earlier run's loaders.json, beside it")
    args = parser.parse_args()
    if args.plot:
        return plot(read_json(args.plot), png_beside(args.plot))
    if not (args.ferry and args.data and args.device and args.out):
        parser.error("--ferry, --data, --device and --out are needed (or --plot JSON)")
    args.ferry = os.path.abspath(args.ferry)
    args.data = os.path.abspath(args.data)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.data, exist_ok=True)

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("loaders: --device cuda, but this torch sees no CUDA device")
    device = torch.device("cuda:0" if args.device == "cuda" else "cpu")
    cores = len(os.sched_getaffinity(0))
    parse = lambda text: [int(t) for t in text.split(",")]
    threads = parse(args.threads) if args.threads else [1, 2] if args.quick else [t for t in (1, 2, 4, 8, 16) if t <= cores]
    token_threads = (parse(args.token_threads) if args.token_threads
                     else [2] if args.quick else sorted({min(t, cores) for t in (4, 16)}))

    info = run([args.ferry, "info"]).stdout.splitlines()
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none"
    header = (f"ferry vs torch DataLoader on {device} ({gpu}), {cores} cores, {info[0]}, "
              f"{info[1].split(None, 1)[1].strip() if len(info) > 1 else ''}; "
              f"python {platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}, "
              f"Pillow {Image.__version__}{'; --quick' if args.quick else ''}")
    # ferry's command may run with another malloc than this interpreter's (cmake/FerryMalloc.cmake): say both.
    ferry_malloc = next((line.split(None, 1)[1] for line in info if line.strip().startswith("malloc")), "unknown")
    python_malloc = "preloaded " + os.environ["LD_PRELOAD"] if os.environ.get("LD_PRELOAD") else "the interpreter's own"
    header += f"\nmalloc: ferry {ferry_malloc}; DataLoader (this interpreter) {python_malloc}"
    result = {"benchmark": "loaders", "device": str(device), "gpu": gpu, "cores": cores, "ferry": info[0],
              "ferry_malloc": ferry_malloc, "python_malloc": python_malloc,
              "torch": torch.__version__, "python": platform.python_version(), "pillow": Image.__version__,
              "quick": args.quick,
              "rates": "ferry: report samples/wall_seconds (pipeline start to last batch ready); DataLoader: from "
                       "iter() to the last batch on the device after torch.cuda.synchronize(), CUDA and pinned "
                       "memory warmed first; after_first: without the first batch"}
    tables = [header]
    started = time.perf_counter()
    if "images" not in args.skip:
        result["images"] = bench_images(args, device, threads, args.out)
        r = result["images"]
        tables.append(table(f"\nimages: {r['images']} JPEGs {IMAGE_SIZE}x{IMAGE_SIZE} (mean {r['mean_kilobytes']:.1f} kB), "
                            f"batches of {r['batch_size']} HWC uint8 + labels to {device}",
                            r["points"], 1, "images/s",
                            "ferry: jpeg (libjpeg-turbo), decode.threads T, prefetch 4; DataLoader: PIL "
                            "Image.open().convert('RGB'), num_workers T, pin_memory on cuda.\n"
                            "rates include each loader's start; 'after 1st' is the DataLoader without its first batch"))
    if "tokens" not in args.skip:
        result["tokens"] = bench_tokens(args, device, token_threads, args.out)
        r = result["tokens"]
        tables.append(table(f"\ntokens: {r['tokens']:,} tokens ({r['stored_dtype']}), seq_len {SEQ_LEN}, batches of "
                            f"{TOKEN_BATCH} x {WINDOW} {r['delivered_dtype'].replace('torch.', '')} to {device}, shuffled",
                            r["points"], WINDOW, "tokens/s",
                            f"tokens/s = samples/s x {WINDOW} (each window's tokens, one shared with the next); "
                            "ferry: configs/megatron.yaml, decode.threads T;\nDataLoader: numpy.memmap windows, "
                            "num_workers T, pin_memory on cuda. Rates include each loader's start.\n"
                            f"ferry with prefetch 16 instead of the config's 4, {r['ferry_prefetch_16']['threads']} threads: "
                            f"{r['ferry_prefetch_16']['ferry_samples_per_second'] * WINDOW:,.0f} tokens/s"))
    result["seconds"] = time.perf_counter() - started
    text = "\n".join(tables)
    print(text, flush=True)
    with open(os.path.join(args.out, "loaders.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "loaders.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {os.path.join(args.out, 'loaders.json')} ({result['seconds']:.0f} s)")
    plot(result, os.path.join(args.out, "loaders.png"))


if __name__ == "__main__":
    main()
