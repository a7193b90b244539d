#!/usr/bin/env python3
"""A tiny GPT trained on token windows that ferry cuts from flat token files (nanoGPT's train.bin,
uint16 tokens back to back) and mixes by weight, inputs and targets already split and int64, on the
GPU when there is one. Without files of your own it writes two small ones: "text" whose next token
follows from the last, which the model learns to predict.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/python/train_gpt.py [STEPS] [A.bin B.bin]
"""
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import ferry

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
vocab, seq_len = 256, 32
workdir = tempfile.TemporaryDirectory()
files = sys.argv[2:4]
if not files:
    rng = np.random.default_rng(0)
    for name, step in [("web.bin", 7), ("code.bin", 13)]:
        tokens = np.empty(20_000, dtype=np.uint16)
        tokens[0] = 1
        for i in range(1, len(tokens)):  # mostly the rule, sometimes noise
            tokens[i] = (tokens[i - 1] * step + 3) % vocab if rng.random() > 0.05 else rng.integers(vocab)
        tokens.tofile(Path(workdir.name) / name)
        files.append(str(Path(workdir.name) / name))

config = {
    "source": {"mix": [
        {"weight": 0.7, "source": {"kind": "tokens", "path": files[0], "dtype": "uint16", "seq_len": seq_len,
                                   "windows": "random", "samples": steps * 32, "split": ["x", "y"]}},
        {"weight": 0.3, "source": {"kind": "tokens", "path": files[1], "dtype": "uint16", "seq_len": seq_len,
                                   "windows": "random", "samples": steps * 32, "split": ["x", "y"]}},
    ], "samples": steps * 32},
    "batch_size": 32,
    "sampler": {"seed": 1},
    "transfer": {"device": "auto"},  # the first GPU when there is one
}


class TinyGPT(torch.nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.position = torch.nn.Parameter(torch.zeros(seq_len, width))
        layer = torch.nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.0, batch_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, 1)
        self.head = torch.nn.Linear(width, vocab)
        self.register_buffer("causal", torch.triu(torch.full((seq_len, seq_len), float("-inf")), 1))

    def forward(self, x):
        return self.head(self.blocks(self.embed(x) + self.position, mask=self.causal))


with ferry.Pipeline(config) as batches:
    model = TinyGPT().to(batches.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for batch in batches:  # x, y: [32, 32] int64 on batches.device, y one token after x
        logits = model(batch["x"])
        loss = torch.nn.functional.cross_entropy(logits.view(-1, vocab), batch["y"].view(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if batch.index % 25 == 0:
            print(f"step {batch.index:4d}/{len(batches)}  loss {loss.item():.3f}")
    print(f"final loss {loss.item():.3f} on {batches.device}; {batches.stats()['bottleneck']}")
