#!/usr/bin/env python3
"""bench/language_data.py: language-model batches on the device, ferry beside nanoGPT's get_batch and torch's
DataLoader on the same token file, and a weighted mixture of Megatron-LM datasets beside its sources alone,
in one run.

    PYTHONPATH=build/gpu/python python3 bench/language_data.py --ferry build/gpu/cli/ferry \\
        --data build/gpu/bench-data/language --out gpu-results/language [--workers 4] [--quick]

Random windows (the rows "windows"): a flat uint16 file of --tokens tokens (made in --data when missing),
batches of 32 windows of seq_len + 1 tokens at uniform random offsets, split into x and y (int64), on the
device:
  get_batch   nanoGPT's own: np.memmap opened per batch, torch.randint offsets, torch.stack of
              the slices .astype(np.int64), pin_memory() and .to(device, non_blocking=True);
  DataLoader  num_workers W, a map-style Dataset drawing each window from its index, pin_memory, then
              .to(device, non_blocking=True);
  ferry       source kind tokens, windows: random, split: [x, y], decode.threads W.

Mixture (the rows "mixture"): three Megatron-LM indexed datasets (`ferry make-dataset tokens`), strided
windows of 2048 tokens, shuffled, batches of 32: each dataset alone, and the three mixed 0.5/0.3/0.2;
the mixture's cost is 1 - its rate / the mean rate of its sources alone (goal: at most 5%).

Text (the rows "text"): JSON-lines files of --texts documents of made-up words (short ones, as captions,
cut or padded to 77 ids; long ones, as web pages, cut to 1024; and a tenth as many books, 3000-10000 words,
cut to 1024), tokenized by a sentencepiece model trained on them, batches of 32 int64 rows on the device:
  DataLoader  num_workers W, a map-style Dataset reading line i (its offset found once, as ferry does),
              json.loads, the sentencepiece Python module's encode, cut and padded, pin_memory;
  ferry       source kind jsonl, the sentencepiece decoder, decode.threads W (goal: 3x DataLoader);
  encode alone  the sentencepiece Python module's encode of each whole text, cut, in one thread with no
              loader: what the DataLoader's workers do, each (ferry encodes only the start it keeps,
              Note [encoding only what is kept]).

Rates are tokens / wall time over the batches after a tenth as many untimed ones (the loader's start),
to a device synchronize after the last batch.
Prints the tables, writes OUT/language_data.json and, with matplotlib, OUT/language_data.png (--plot JSON
draws it again, beside that JSON, from an earlier run's). --quick:
small sizes for a CPU machine (device cpu).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import torch
import torch.utils.data

import ferry
from bench_support import figure, png_beside, read_json, save  # bench/, beside this script

BATCH = 32


def log(message):
    print(f"language_data: {message}", file=sys.stderr, flush=True)


def token_file(folder, tokens):
    path = os.path.join(folder, f"train-{tokens}.bin")
    if not os.path.exists(path):
        log(f"writing {tokens} uint16 tokens to {path}")
        rng = np.random.default_rng(0)
        with open(path + ".part", "wb") as f:
            left = tokens
            while left:
                chunk = min(left, 1 << 26)
                rng.integers(0, 50257, chunk, dtype=np.uint16).tofile(f)
                left -= chunk
        os.replace(path + ".part", path)
    return path


def megatron_datasets(ferry_command, folder, documents):
    prefixes = []
    for k in range(3):
        prefix = os.path.join(folder, f"megatron-{k}-{documents}")
        if not os.path.exists(prefix + ".idx"):
            log(f"making {prefix}")
            subprocess.run([ferry_command, "make-dataset", "tokens", prefix, "--documents", str(documents), "--seed",
                            str(k)], check=True, capture_output=True)
        prefixes.append(prefix)
    return prefixes


WORDS = None


def text_files(folder, texts):
    """JSON-lines files of `texts` documents of made-up words (a Zipf draw over 20000 of them), short (5-40
    words) and long (300-1500 words), of texts / 10 books (3000-10000 words), and a sentencepiece model of
    4000 pieces trained on the short ones."""
    import sentencepiece as spm
    rng = np.random.default_rng(3)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, n)) for n in rng.integers(2, 11, 20000)]
    paths = {}
    for kind, (low, high, count) in {"short": (5, 40, texts), "long": (300, 1500, texts),
                                     "book": (3000, 10000, max(texts // 10, 1))}.items():
        path = os.path.join(folder, f"text-{kind}-{count}.jsonl")
        paths[kind] = path
        if os.path.exists(path):
            continue
        log(f"writing {count} {kind} documents to {path}")
        with open(path + ".part", "w") as f:
            for n in rng.integers(low, high, count):
                picks = np.minimum(rng.zipf(1.3, n), len(words)) - 1
                f.write(json.dumps({"text": " ".join(words[i] for i in picks)}) + "\n")
        os.replace(path + ".part", path)
    model = os.path.join(folder, f"text-{texts}.model")
    if not os.path.exists(model):
        log(f"training {model}")
        spm.SentencePieceTrainer.train(input=paths["short"], model_prefix=model[:-len(".model")], vocab_size=4000,
                                       hard_vocab_limit=False, input_sentence_size=20000, shuffle_input_sentence=True,
                                       minloglevel=2)
    return paths, model


class JsonlTexts(torch.utils.data.Dataset):
    """Line i of a JSON-lines file, its "text" tokenized by the sentencepiece module, cut and padded to
    `length` ids: what a DataLoader pipeline does with text."""

    def __init__(self, path, model, length, samples):
        with open(path, "rb") as f:
            data = f.read()
        self.offsets = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
        self.offsets = np.concatenate([[0], self.offsets[:-1] + 1])
        self.path, self.model, self.length, self.samples = path, model, length, samples
        self.file = self.processor = None

    def __len__(self):
        return self.samples

    def __getitem__(self, index):
        if self.file is None:  # opened in the worker
            import sentencepiece as spm
            self.file = open(self.path, "rb")
            self.processor = spm.SentencePieceProcessor(model_file=self.model)
        self.file.seek(int(self.offsets[index % len(self.offsets)]))
        ids = self.processor.encode(json.loads(self.file.readline())["text"])[:self.length]
        out = torch.zeros(self.length, dtype=torch.int64)
        out[:len(ids)] = torch.tensor(ids, dtype=torch.int64)
        return out


def text_dataloader_rate(path, model, length, workers, device, batches):
    dataset = JsonlTexts(path, model, length, (batches + batches // 10 + 1) * BATCH)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=workers,
                                         pin_memory=device.type == "cuda", prefetch_factor=4)
    it = iter(loader)

    def step():
        ids = next(it).to(device, non_blocking=True)
        return ids.numel()
    return timed(device, batches, step)


def encode_alone_rate(path, model, length, batches):
    import sentencepiece as spm
    processor = spm.SentencePieceProcessor(model_file=model)
    with open(path, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(batches * BATCH), f)]
    start, ids = time.perf_counter(), 0
    for text in texts:  # for about two seconds: a book takes tens of milliseconds
        ids += len(processor.encode(text)[:length])
        if time.perf_counter() - start > 2:
            break
    return ids / (time.perf_counter() - start)


def text_config(path, model, length, workers):
    field = {"name": "ids", "key": "text", "decoder": "sentencepiece", "model": model, "dtype": "int64",
             "shape": [length]}
    return {"source": {"kind": "jsonl", "files": path, "fields": [field]}, "batch_size": BATCH,
            "decode": {"threads": workers}, "sampler": {"shuffle": True, "epochs": 1000}}


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device, batches, step):
    """Tokens / s of `batches` calls of step() (each returning the tokens it delivered), after a tenth as
    many untimed ones: the steady rate, without the loader's start (workers, threads, pinned memory)."""
    for _ in range(max(1, batches // 10)):
        step()
    synchronize(device)
    start = time.perf_counter()
    tokens = 0
    for _ in range(batches):
        tokens += step()
    synchronize(device)
    return tokens / (time.perf_counter() - start)


def get_batch_rate(path, seq_len, device, batches):
    # nanoGPT's train.py get_batch, as written there.
    def step():
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - seq_len, (BATCH,))
        x = torch.stack([torch.from_numpy((data[i:i + seq_len]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + seq_len]).astype(np.int64)) for i in ix])
        if device.type == "cuda":
            x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x.numel()
    return timed(device, batches, step)


class RandomWindows(torch.utils.data.Dataset):
    def __init__(self, path, seq_len, length):
        self.path, self.seq_len, self.length, self.data = path, seq_len, length, None

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if self.data is None:  # opened in the worker
            self.data = np.memmap(self.path, dtype=np.uint16, mode="r")
        start = int(np.random.default_rng(index).integers(0, len(self.data) - self.seq_len))
        window = torch.from_numpy(self.data[start:start + self.seq_len + 1].astype(np.int64))
        return window[:-1], window[1:]


def dataloader_rate(path, seq_len, workers, device, batches):
    loader = torch.utils.data.DataLoader(RandomWindows(path, seq_len, (batches + batches // 10 + 1) * BATCH),
                                         batch_size=BATCH,
                                         num_workers=workers, pin_memory=device.type == "cuda",
                                         persistent_workers=False, prefetch_factor=4)
    it = iter(loader)

    def step():
        x, y = next(it)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        return x.numel()
    return timed(device, batches, step)


def ferry_rate(config, device, batches, tokens_of):
    pipeline = ferry.Pipeline(config, overrides={"transfer.device": str(device)})
    with pipeline:
        it = iter(pipeline.batches())

        def step():
            return tokens_of(next(it))
        return timed(device, batches, step)


def windows_config(path, seq_len, workers, batches):
    return {"source": {"kind": "tokens", "path": path, "dtype": "uint16", "seq_len": seq_len, "windows": "random",
                       "samples": (batches + batches // 10 + 1) * BATCH, "split": ["x", "y"]},
            "batch_size": BATCH, "decode": {"threads": workers}}


def plot(result, path):
    """OUT/language_data.png: M tokens/s of every row, coloured by table."""
    rows = result["rows"]
    drawn, (axis,) = figure(1, f"language-model batches of {result['batch']}, {result['device']}", width=7, height=4)
    if drawn is None:
        return
    labels = [f"{r['loader']}\n{r['seq_len']}" + (f" w{r['workers']}" if r["loader"] != "get_batch" else "")
              for r in rows]
    axis.bar(range(len(rows)), [r["tokens_per_second"] / 1e6 for r in rows],
             color=[{"windows": "tab:blue", "mixture": "tab:orange", "text": "tab:green"}[r["table"]] for r in rows])
    axis.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
    axis.set_ylabel("M tokens / s")
    save(drawn, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ferry", help="the ferry command (for make-dataset)")
    parser.add_argument("--data")
    parser.add_argument("--out")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--workers", default="4")
    parser.add_argument("--tokens", type=int, default=1 << 29)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--documents", type=int, default=100000)
    parser.add_argument("--texts", type=int, default=200000, help="documents per JSON-lines file")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tables", default="windows,mixture,text", help="which tables to measure")
    parser.add_argument("--texts-kinds", default="short,long,book", help="which texts the text table measures")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plot", metavar="JSON",
                        help="only draw the plot of an earlier run's language_data.json, beside it")
    args = parser.parse_args()
    if args.plot:
        return plot(read_json(args.plot), png_beside(args.plot))
    if not (args.ferry and args.data and args.out):
        parser.error("--ferry, --data and --out are needed (or --plot JSON)")
    if args.quick:
        args.tokens, args.batches, args.documents, args.repeats, args.workers = 1 << 22, 40, 2000, 1, "2"
        args.texts = 3000
    device = torch.device(args.device)
    cores = len(os.sched_getaffinity(0))
    workers = [w for w in (int(x) for x in args.workers.split(",")) if w <= cores] or [cores]
    os.makedirs(args.data, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    tables = set(args.tables.split(","))
    rows = []

    def measure(table, name, w, seq_len, rate_of):
        rates = []
        for _ in range(args.repeats):
            rates.append(rate_of())
        rows.append({"table": table, "loader": name, "workers": w, "seq_len": seq_len,
                     "tokens_per_second": float(np.median(rates)), "runs": rates})
        log(f"{table} {name} w={w} seq_len={seq_len}: {np.median(rates) / 1e6:.1f} M tokens/s")

    for seq_len in (1024, 2048) if "windows" in tables else ():
        path = token_file(args.data, args.tokens)
        measure("windows", "get_batch", 1, seq_len, lambda: get_batch_rate(path, seq_len, device, args.batches))
        for w in workers:
            measure("windows", "DataLoader", w, seq_len,
                    lambda: dataloader_rate(path, seq_len, w, device, args.batches))
            measure("windows", "ferry", w, seq_len,
                    lambda: ferry_rate(windows_config(path, seq_len, w, args.batches), device, args.batches,
                                       lambda b: b["x"].numel()))

    if "mixture" in tables:
        prefixes = megatron_datasets(args.ferry, args.data, args.documents)
        sources = [{"kind": "megatron", "prefix": p, "seq_len": 2048} for p in prefixes]
        w = workers[-1]

        def megatron_config(source):
            return {"source": source, "batch_size": BATCH, "decode": {"threads": w},
                    "sampler": {"shuffle": True, "seed": 1, "epochs": 100}}
        for k, source in enumerate(sources):
            measure("mixture", f"source {k} alone", w, 2048,
                    lambda: ferry_rate(megatron_config(source), device, args.batches, lambda b: b["tokens"].numel()))
        mixture = {"mix": [{"weight": weight, "source": s} for weight, s in zip((0.5, 0.3, 0.2), sources)]}
        measure("mixture", "mixture 0.5/0.3/0.2", w, 2048,
                lambda: ferry_rate(megatron_config(mixture), device, args.batches, lambda b: b["tokens"].numel()))

    if "text" in tables:
        texts, model = text_files(args.data, args.texts)
        lengths = {"short": 77, "long": 1024, "book": 1024}
        for kind in args.texts_kinds.split(","):
            length = lengths[kind]
            measure("text", f"encode alone {kind}", 1, length,
                    lambda: encode_alone_rate(texts[kind], model, length, args.batches))
            for w in workers:
                measure("text", f"DataLoader {kind}", w, length,
                        lambda: text_dataloader_rate(texts[kind], model, length, w, device, args.batches))
                measure("text", f"ferry {kind}", w, length,
                        lambda: ferry_rate(text_config(texts[kind], model, length, w), device, args.batches,
                                           lambda b: b["ids"].numel()))

    print(f"\nlanguage-model batches of {BATCH}, torch {torch.__version__}, device {device}, {cores} cores, "
          f"{platform.node()}, medians of {args.repeats} runs of {args.batches} batches")
    print(f"{'rows':<8} {'loader':<20} {'workers':>7} {'seq_len':>7} {'M tokens/s':>11} {'vs':>16}")
    for r in rows:
        if r["table"] == "windows":
            base = next(b for b in rows if b["table"] == "windows" and b["loader"] == "get_batch"
                        and b["seq_len"] == r["seq_len"])
            r["ratio"] = r["tokens_per_second"] / base["tokens_per_second"]
            versus = f"{r['ratio']:.2f}x get_batch"
        elif r["table"] == "text" and r["loader"].startswith("encode alone"):
            r["ratio"] = 1.0
            versus = "one thread"
        elif r["table"] == "text":
            kind = r["loader"].split()[-1]
            base = next(b for b in rows if b["table"] == "text" and b["loader"] == f"DataLoader {kind}"
                        and b["workers"] == r["workers"])
            r["ratio"] = r["tokens_per_second"] / base["tokens_per_second"]
            versus = f"{r['ratio']:.2f}x DataLoader"
        else:
            alone = [b["tokens_per_second"] for b in rows if b["table"] == "mixture" and b["loader"].endswith("alone")]
            r["ratio"] = r["tokens_per_second"] / float(np.mean(alone))
            versus = f"{r['ratio']:.3f}x mean alone"
        print(f"{r['table']:<8} {r['loader']:<20} {r['workers']:>7} {r['seq_len']:>7} "
              f"{r['tokens_per_second'] / 1e6:>11.1f} {versus:>16}")
    for r in rows:
        if r["table"] == "text" and r["loader"].startswith("ferry"):
            print(f"text {r['loader']} w={r['workers']}: {r['ratio']:.2f}x DataLoader (goal: at least 3x)")
    for mixed in (r for r in rows if r["loader"].startswith("mixture")):
        print(f"mixture cost: {100 * (1 - mixed['ratio']):.1f}% (goal: at most 5%)")
    result = {"batch": BATCH, "device": str(device), "cores": cores, "torch": torch.__version__,
              "host": platform.node(), "rows": rows}
    with open(os.path.join(args.out, "language_data.json"), "w") as f:
        json.dump(result, f, indent=2)
    plot(result, os.path.join(args.out, "language_data.png"))


if __name__ == "__main__":
    main()
