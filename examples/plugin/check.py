"""The example plugin from Python: loads it, runs a config that uses its source, decoder and transform,
and checks every value of every batch against the CSV file read here with nothing but Python.

    python3 check.py PLUGIN CONFIG [--set key=value]... [--digest FILE]

--digest FILE: also checks a `ferry run CONFIG --digest FILE` of the same config, batch by batch, against
the batches Python received (the same FNV-1a hash of each batch's tensors as the command's).
Prints one line and exits 0 when everything matches."""

import argparse
import csv
import os
import sys

import torch

import ferry

# The ScalarType numbers the command's digest hashes (c10/core/ScalarType.h).
SCALAR_TYPES = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
                torch.float32: 6, torch.float64: 7, torch.bool: 11, torch.bfloat16: 15}


def fnv1a(data, state=0xcbf29ce484222325):
    for byte in data:
        state = ((state ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return state


def batch_bytes_hash(batch):
    state = 0xcbf29ce484222325
    for name, tensor in batch.items():
        state = fnv1a(name.encode() + b"\0", state)
        state = fnv1a(SCALAR_TYPES[tensor.dtype].to_bytes(1, "little", signed=True), state)
        for size in tensor.shape:
            state = fnv1a(int(size).to_bytes(8, "little", signed=True), state)
        state = fnv1a(tensor.cpu().contiguous().view(torch.uint8).numpy().tobytes(), state)
    return f"{state:016x}"


def records(path):
    """The CSV file's records as the csv source and text_numbers make them: (numbers, file line)."""
    rows = []
    with open(path, newline="") as f:
        header = True
        for number, line in enumerate(f.read().split("\n"), start=1):
            line = line.rstrip("\r")
            if not line or line.startswith("#"):
                continue
            if header:
                header = False
                continue
            rows.append([float(value) for value in next(csv.reader([line]))])
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("plugin")
    parser.add_argument("config")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--digest")
    args = parser.parse_args()

    ferry.load_plugin(args.plugin)
    overrides = args.overrides + [f"plugins=[{os.path.abspath(args.plugin)}]"]
    pipeline = ferry.Pipeline(args.config, overrides=overrides)
    source = dict(item.split("=", 1) for item in overrides).get("source.path")
    path = source or os.path.join(os.path.dirname(os.path.abspath(args.config)), "records.csv")
    rows = records(path)
    label = 4
    hashes = []
    samples = 0
    for batch in pipeline.batches():
        features, labels = batch["features"].cpu(), batch["label"].cpu()
        assert features.dtype == torch.float32 and labels.dtype == torch.int64, (features.dtype, labels.dtype)
        for row, index in enumerate(batch.sample_indices):
            numbers = torch.tensor(rows[index], dtype=torch.float32)
            expected = torch.cat([numbers[:label], numbers[label + 1:]])
            assert torch.equal(features[row], expected), (index, features[row], expected)
            assert labels[row].item() == int(rows[index][label]), (index, labels[row], rows[index])
            samples += 1
        hashes.append(batch_bytes_hash(batch))
    if args.digest:
        with open(args.digest) as f:
            lines = [line.split() for line in f if line.strip()]
        command = [line[line.index("bytes") + 1] for line in lines]
        assert command == hashes, f"ferry run's batches differ from Python's:\n{command}\n{hashes}"
    print(f"checked {len(hashes)} batches, {samples} samples of {len(rows)} records: every value as in {path}"
          + (", and ferry run's digest matches" if args.digest else ""))


if __name__ == "__main__":
    sys.exit(main())
