#!/usr/bin/env python3
"""A training script written for torch's DataLoader, ported to ferry by changing the lines marked
`ferry:`. The dataset is the team's own map-style Dataset (a dict of numpy arrays per sample, with a
random flip of its own); ferry runs it in worker processes that write each sample straight into the
memory batches are packed from, and delivers the batches on the GPU (or the CPU when there is none).

    PYTHONPATH=build/release/python /usr/bin/python3 examples/python/train_custom_dataset.py [EPOCHS] [--dataloader]

Both loaders train the same model on the same samples; --dataloader runs the original for comparison.
"""
import sys

import numpy as np
import torch

import ferry


class Shapes(torch.utils.data.Dataset):
    """Images of a bright square on the left (label 0) or the right (label 1), with noise: the team's own
    Dataset, unchanged for ferry except that its random flip draws from ferry.sample_rng() when ferry
    runs it, so that a resumed run sees the same flips."""

    def __init__(self, length=4096, size=32):
        self.length = length
        self.size = size

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        label = int(rng.integers(0, 2))
        image = rng.integers(0, 64, size=(3, self.size, self.size), dtype=np.uint8)
        left = 4 if label == 0 else self.size // 2 + 4
        image[:, 8:24, left:left + 8] += 128
        # ferry: random numbers for the sample being made, the same on every run and after a resume.
        flips = ferry.sample_rng() if in_ferry() else np.random.default_rng()
        if flips.random() < 0.5:  # a vertical flip keeps the label
            image = image[:, ::-1, :].copy()
        return {"image": image, "label": label}


def in_ferry():
    try:
        ferry.sample_info()
        return True
    except RuntimeError:
        return False


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 2
    use_dataloader = "--dataloader" in sys.argv
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = Shapes()
    if use_dataloader:
        batches = torch.utils.data.DataLoader(dataset, batch_size=128, shuffle=True, num_workers=2,
                                              pin_memory=device.type == "cuda", persistent_workers=True)
    else:
        # ferry: the same Dataset object, the DataLoader's arguments as a config.
        batches = ferry.Pipeline.from_dataset(dataset, {
            "batch_size": 128, "sampler": {"shuffle": True, "epochs": epochs},
            "decode": {"workers": 2}, "transfer": {"device": str(device)}})
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 5, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
                                torch.nn.Flatten(), torch.nn.Linear(128, 2)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(epochs):
        for step, batch in enumerate(batches):
            # ferry: the batch is already on the device; with the DataLoader it is moved here.
            image = batch["image"].to(device, non_blocking=True).float() / 255
            label = batch["label"].to(device, non_blocking=True)
            logits = model(image)
            loss = torch.nn.functional.cross_entropy(logits, label)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 16 == 0:
                accuracy = (logits.argmax(1) == label).float().mean().item()
                print(f"epoch {epoch} step {step:3d}  loss {loss.item():.4f}  accuracy {accuracy:.3f}")
    accuracy = (logits.argmax(1) == label).float().mean().item()
    print(f"final accuracy {accuracy:.3f} with {'DataLoader' if use_dataloader else 'ferry'} on {device}")
    if not use_dataloader:
        batches.close()


if __name__ == "__main__":
    main()
