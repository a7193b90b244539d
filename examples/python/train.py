#!/usr/bin/env python3
"""A small torch model trained on batches that ferry delivers already on the GPU (or the CPU when
there is none): the Python twin of examples/train.cpp. The data is synthetic, 64 features per
sample, and the model learns whether the first 32 features sum higher than the last 32.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/python/train.py [EPOCHS]
"""
import sys

import torch

import ferry

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
config = {
    "source": {"kind": "synthetic", "samples": 32768, "seed": 1,
               "fields": [{"name": "features", "dtype": "float32", "shape": [64]}]},
    "batch_size": 256,
    "sampler": {"shuffle": True, "epochs": epochs},
    "transfer": {"device": "auto"},  # the first GPU when there is one
}

with ferry.Pipeline(config) as batches:
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2)).to(batches.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        for batch in batches:  # one epoch, in its own order: ferry.Batch, a dict of tensors
            x = batch["features"]  # [256, 64] float32, already on batches.device
            y = (x[:, :32].sum(1) > x[:, 32:].sum(1)).long()
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if batch.index % 64 == 0:
                accuracy = (logits.argmax(1) == y).float().mean().item()
                print(f"epoch {batch.epoch} batch {batch.index:3d}/{len(batches)}  loss {loss.item():.4f}  "
                      f"accuracy {accuracy:.3f}")
    accuracy = (logits.argmax(1) == y).float().mean().item()
    print(f"final accuracy {accuracy:.3f} on {batches.device}; {batches.stats()['bottleneck']}")
