#!/usr/bin/env python3
"""Detection data through ferry: JPEGs and their `.json` targets in tar shards, random-resized crops and
flips drawn as torchvision's RandomResizedCrop and RandomHorizontalFlip draw them, the boxes moved with
the image (and dropped, with their labels, when the crop leaves too little of them), delivered on the
GPU (or the CPU when there is none) as batches a training step uses as they are.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/python/train_detection.py [EPOCHS] [SHARD]

Without SHARD it writes a small dataset first: each image holds one to three coloured rectangles on a
noisy background, each rectangle's box and its colour's class in the sample's `.json`. A small model
learns the colour of the largest visible object and its box.
"""
import io
import json
import os
import sys
import tarfile
import tempfile

import numpy as np
import torch

import ferry

COLOURS = [(220, 40, 40), (40, 200, 60), (50, 80, 230)]


def write_dataset(path, samples=768, seed=0):
    from PIL import Image  # only to write the example's own dataset
    rng = np.random.default_rng(seed)
    with tarfile.open(path, "w") as tar:
        for key in range(samples):
            height, width = int(rng.integers(120, 260)), int(rng.integers(120, 260))
            image = rng.integers(0, 60, (height, width, 3), dtype=np.uint8)
            boxes, labels = [], []
            for _ in range(int(rng.integers(1, 4))):
                w, h = int(rng.integers(width // 5, width // 2)), int(rng.integers(height // 5, height // 2))
                x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
                label = int(rng.integers(0, len(COLOURS)))
                image[y:y + h, x:x + w] = COLOURS[label]
                boxes.append([x, y, x + w, y + h])
                labels.append(label)
            jpeg = io.BytesIO()
            Image.fromarray(image).save(jpeg, format="JPEG", quality=90)
            for extension, data in (("jpg", jpeg.getvalue()),
                                    ("json", json.dumps({"boxes": boxes, "labels": labels}).encode())):
                info = tarfile.TarInfo(f"{key:06d}.{extension}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def config(shard, size, epochs):
    return {
        "source": {"kind": "tar", "shards": [shard], "members": [
            # torchvision's RandomResizedCrop(size, scale=(0.3, 1)) and RandomHorizontalFlip(0.5); the window
            # each image got is the field image_window.
            {"name": "image", "extension": "jpg", "decoder": "jpeg", "shape": [size, size, 3],
             "crop": "random_resized", "scale": [0.3, 1.0], "flip": 0.5, "window": True},
            # One .json feeds two fields: JSON pointers select its values.
            {"name": "boxes", "extension": "json", "decoder": "json", "select": "/boxes", "dtype": "float32",
             "shape": [None, 4], "max_length": 8},
            {"name": "labels", "extension": "json", "decoder": "json", "select": "/labels", "dtype": "int64",
             "shape": [None], "max_length": 8}]},
        # The boxes follow the crop and flip; those with less than a third of their area left go, with their
        # labels.
        "transforms": [{"kind": "boxes", "window": "image_window", "boxes": ["boxes"], "follow": ["labels"],
                        "min_visible": 0.33}],
        # A sample's boxes and labels as lists of tensors (views of the batch's buffer), the rest stacked.
        "collate": {"lists": ["boxes", "labels"]},
        "batch_size": 64,
        "sampler": {"shuffle": True, "seed": 7, "epochs": epochs},
        "decode": {"threads": 2},
        "augment": {"field": "image", "normalize": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}},
    }


class Detector(torch.nn.Module):
    """The class and box (x1, y1, x2, y2 as fractions of the image) of an image's largest object."""

    def __init__(self, classes):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten())
        self.classes = torch.nn.Linear(64 * 16, classes)
        self.box = torch.nn.Linear(64 * 16, 4)

    def forward(self, images):
        features = self.features(images)
        return self.classes(features), torch.sigmoid(self.box(features))


def largest(boxes, labels, size):
    """Per sample, the largest box (as fractions) and its label; samples whose boxes were all cropped
    away are left out (their mask is False)."""
    targets, classes, keep = [], [], []
    for sample_boxes, sample_labels in zip(boxes, labels):
        if sample_boxes.shape[0] == 0:
            targets.append(torch.zeros(4, device=sample_boxes.device))
            classes.append(torch.zeros((), dtype=torch.long, device=sample_boxes.device))
            keep.append(False)
            continue
        areas = (sample_boxes[:, 2] - sample_boxes[:, 0]) * (sample_boxes[:, 3] - sample_boxes[:, 1])
        best = int(areas.argmax())
        targets.append(sample_boxes[best] / size)
        classes.append(sample_labels[best])
        keep.append(True)
    return torch.stack(targets), torch.stack(classes), torch.tensor(keep, device=targets[0].device)


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    size = 96
    with tempfile.TemporaryDirectory() as scratch:
        shard = sys.argv[2] if len(sys.argv) > 2 else os.path.join(scratch, "detection-000.tar")
        if len(sys.argv) <= 2:
            write_dataset(shard)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = Detector(len(COLOURS)).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        with ferry.Pipeline(config(shard, size, epochs), overrides={"transfer.device": str(device)}) as pipeline:
            for epoch in range(epochs):
                correct = total = 0
                for batch in pipeline:
                    targets, classes, keep = largest(batch["boxes"], batch["labels"], size)
                    logits, boxes = model(batch["image"].float())
                    loss = (torch.nn.functional.cross_entropy(logits[keep], classes[keep]) +
                            torch.nn.functional.l1_loss(boxes[keep], targets[keep]))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    correct += int((logits[keep].argmax(1) == classes[keep]).sum())
                    total += int(keep.sum())
                print(f"epoch {epoch}: loss {loss.item():.3f}, accuracy {correct / max(total, 1):.3f}")
    print(f"final accuracy {correct / max(total, 1):.3f}")


if __name__ == "__main__":
    main()
